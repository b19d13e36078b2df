"""ExecuTorch ScalarType codes -> torch dtypes.

The codes are c10::ScalarType's, so the mapping is by number; codes the format
has but torch cannot hold (the sub-byte quantized packings) map to uint8, as
their storage is bytes.
"""

from __future__ import annotations

import torch

from pterun.errors import InvalidProgram

_BY_CODE: dict[int, torch.dtype] = {
    0: torch.uint8,
    1: torch.int8,
    2: torch.int16,
    3: torch.int32,
    4: torch.int64,
    5: torch.float16,
    6: torch.float32,
    7: torch.float64,
    11: torch.bool,
    12: torch.qint8,
    13: torch.quint8,
    14: torch.qint32,
    15: torch.bfloat16,
    16: torch.quint4x2,
    17: torch.quint2x4,
    22: torch.bits16,
    23: torch.float8_e5m2,
    24: torch.float8_e4m3fn,
    25: torch.float8_e5m2fnuz,
    26: torch.float8_e4m3fnuz,
    27: torch.uint16,
    28: torch.uint32,
    29: torch.uint64,
}

NAMES = {
    0: "Byte", 1: "Char", 2: "Short", 3: "Int", 4: "Long", 5: "Half", 6: "Float", 7: "Double", 11: "Bool",
    12: "QInt8", 13: "QUInt8", 14: "QInt32", 15: "BFloat16", 16: "QUInt4x2", 17: "QUInt2x4", 22: "Bits16",
    23: "Float8_e5m2", 24: "Float8_e4m3fn", 25: "Float8_e5m2fnuz", 26: "Float8_e4m3fnuz", 27: "UInt16",
    28: "UInt32", 29: "UInt64",
}

# Quantized dtypes cannot view raw bytes; programs carry their data as plain
# integers with scales passed separately, so storage uses the integer type.
_STORAGE = {torch.qint8: torch.int8, torch.quint8: torch.uint8, torch.qint32: torch.int32,
            torch.quint4x2: torch.uint8, torch.quint2x4: torch.uint8, torch.bits16: torch.int16}


def to_torch(code: int) -> torch.dtype:
    try:
        return _BY_CODE[code]
    except KeyError:
        raise InvalidProgram(f"scalar type {code} has no torch dtype") from None


def storage_dtype(code: int) -> torch.dtype:
    dtype = to_torch(code)
    return _STORAGE.get(dtype, dtype)


def name(code: int) -> str:
    return NAMES.get(code, f"ScalarType({code})")
