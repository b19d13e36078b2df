"""ExecuTorch ScalarType codes -> torch dtypes: the torch column of ``pterun.enums.SCALAR_TYPES``.

The codes are c10::ScalarType's, so the mapping is by number; every code of the
format's table has a dtype here (``tests/core`` checks the two agree).
"""

from __future__ import annotations

import torch

from pterun.enums import scalar_type_name
from pterun.errors import InvalidProgram

_BY_CODE: dict[int, torch.dtype] = {  # keyed as pterun.enums.SCALAR_TYPES
    0: torch.uint8,
    1: torch.int8,
    2: torch.int16,
    3: torch.int32,
    4: torch.int64,
    5: torch.float16,
    6: torch.float32,
    7: torch.float64,
    8: torch.complex32,
    9: torch.complex64,
    10: torch.complex128,
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

# Quantized dtypes cannot view raw bytes; programs carry their data as plain
# integers with scales passed separately, so storage uses the integer type.
_STORAGE = {torch.qint8: torch.int8, torch.quint8: torch.uint8, torch.qint32: torch.int32,
            torch.quint4x2: torch.uint8, torch.quint2x4: torch.uint8, torch.bits16: torch.int16}


def to_torch(code: int) -> torch.dtype:
    try:
        return _BY_CODE[code]
    except KeyError:
        raise InvalidProgram(f"scalar type {code} has no torch dtype") from None


_CODE_OF = {dtype: code for code, dtype in _BY_CODE.items()}


def storage_dtype(code: int) -> torch.dtype:
    return storage_of(to_torch(code))


def storage_of(dtype: torch.dtype) -> torch.dtype:
    """The dtype tensors of ``dtype`` are stored as (a quantized or bits dtype's integer type)."""
    return _STORAGE.get(dtype, dtype)


def code_of(dtype: torch.dtype) -> int | None:
    """The ScalarType code of ``dtype``, or None for a dtype the format has no code for."""
    return _CODE_OF.get(dtype)


name = scalar_type_name  # c10's name of a code ("Float")
