"""The torch column of the format's tables (core/) agrees with the tables themselves (pterun.enums)."""

import pytest
import torch

from pterun.core import dtype
from pterun.core.device import Device, DeviceType
from pterun.enums import DEVICE_TYPE_LABELS, ELEMENT_SIZE, SCALAR_TYPES, scalar_type_name
from pterun.errors import InvalidArgument, InvalidProgram


def test_every_scalar_type_has_a_torch_dtype_of_its_size():
    assert SCALAR_TYPES, "no scalar types: no premise"
    for code, scalar_type in SCALAR_TYPES.items():
        torch_dtype = dtype.to_torch(code)
        assert dtype.code_of(torch_dtype) == code
        # The sub-byte packings are stored a byte each; every other dtype is as wide as torch's.
        assert ELEMENT_SIZE[code] == dtype.storage_of(torch_dtype).itemsize, scalar_type


def test_a_code_the_format_lacks_is_named_and_refused():
    assert 18 not in SCALAR_TYPES  # Bits1x8: not in the format
    assert scalar_type_name(18) == "ScalarType(18)" and dtype.name(6) == "Float"
    with pytest.raises(InvalidProgram, match="scalar type 18 "):
        dtype.to_torch(18)
    assert dtype.code_of(torch.bits8) is None


def test_complex_codes_the_exporter_writes_are_read():
    """program.fbs's enum stops at Double, but the exporter writes c10's complex codes (torch.stft's result in
    ExecuTorch's Whisper feature extractor), and ExecuTorch's runtime takes them."""
    assert [dtype.to_torch(code) for code in (8, 9, 10)] == [torch.complex32, torch.complex64, torch.complex128]
    assert dtype.code_of(torch.complex64) == 9 and scalar_type_name(9) == "ComplexFloat"


def test_device_types_are_torch_device_types():
    assert DEVICE_TYPE_LABELS == ("cpu", "cuda")
    for device_type in DeviceType:
        assert torch.device(device_type.label).type == device_type.label
        assert Device.parse(device_type.label).type is device_type
    with pytest.raises(InvalidArgument, match="'meta' is not supported; expected cpu or cuda"):
        Device.parse("meta")
