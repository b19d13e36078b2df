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
    assert 8 not in SCALAR_TYPES  # ComplexHalf: not in the format
    assert scalar_type_name(8) == "ScalarType(8)" and dtype.name(6) == "Float"
    with pytest.raises(InvalidProgram, match="scalar type 8 "):
        dtype.to_torch(8)
    assert dtype.code_of(torch.complex64) is None


def test_device_types_are_torch_device_types():
    assert DEVICE_TYPE_LABELS == ("cpu", "cuda")
    for device_type in DeviceType:
        assert torch.device(device_type.label).type == device_type.label
        assert Device.parse(device_type.label).type is device_type
    with pytest.raises(InvalidArgument, match="'meta' is not supported; expected cpu or cuda"):
        Device.parse("meta")
