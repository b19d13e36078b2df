"""ExecuTorch's enumerations, by number, once: ScalarType and DeviceType. No torch.

The format reads these numbers from a file and checks them against these tables; the layers above
extend them (``core/dtype.py``: each ScalarType's torch dtype, ``core/device.py``: a device's index)
instead of listing the codes again.
"""

from __future__ import annotations

import enum
from typing import NamedTuple


class ScalarType(NamedTuple):
    """One of c10's ScalarType codes the format may name."""

    code: int
    name: str  # c10's name ("Float"), as ExecuTorch's messages print it
    size: int  # bytes per element; the sub-byte packings (QUInt4x2, QUInt2x4) are stored a byte each


SCALAR_TYPES: dict[int, ScalarType] = {t.code: t for t in (
    ScalarType(0, "Byte", 1), ScalarType(1, "Char", 1), ScalarType(2, "Short", 2), ScalarType(3, "Int", 4),
    ScalarType(4, "Long", 8), ScalarType(5, "Half", 2), ScalarType(6, "Float", 4), ScalarType(7, "Double", 8),
    # Not in program.fbs's enum, but the exporter writes them (torch.stft's result in ExecuTorch's Whisper
    # feature extractor) and ExecuTorch's runtime takes them.
    ScalarType(8, "ComplexHalf", 4), ScalarType(9, "ComplexFloat", 8), ScalarType(10, "ComplexDouble", 16),
    ScalarType(11, "Bool", 1), ScalarType(12, "QInt8", 1), ScalarType(13, "QUInt8", 1),
    ScalarType(14, "QInt32", 4), ScalarType(15, "BFloat16", 2), ScalarType(16, "QUInt4x2", 1),
    ScalarType(17, "QUInt2x4", 1), ScalarType(22, "Bits16", 2), ScalarType(23, "Float8_e5m2", 1),
    ScalarType(24, "Float8_e4m3fn", 1), ScalarType(25, "Float8_e5m2fnuz", 1),
    ScalarType(26, "Float8_e4m3fnuz", 1), ScalarType(27, "UInt16", 2), ScalarType(28, "UInt32", 4),
    ScalarType(29, "UInt64", 8),
)}
# Element sizes by code; codes outside this table are not in the format.
ELEMENT_SIZE: dict[int, int] = {code: t.size for code, t in SCALAR_TYPES.items()}


def scalar_type_name(code: int) -> str:
    """c10's name of ``code`` ("Float"), or ``ScalarType(N)`` for a code the format does not have."""
    known = SCALAR_TYPES.get(code)
    return known.name if known is not None else f"ScalarType({code})"


class DeviceType(enum.IntEnum):
    """Numbered as the format's DeviceType enum (and ExecuTorch's runtime); named as torch names device types."""

    CPU = 0
    CUDA = 1

    @property
    def label(self) -> str:
        """The name torch gives this type ("cpu", "cuda")."""
        return self.name.lower()


DEVICE_TYPE_CODES = frozenset(t.value for t in DeviceType)
DEVICE_TYPE_LABELS = tuple(t.label for t in DeviceType)  # ("cpu", "cuda")
