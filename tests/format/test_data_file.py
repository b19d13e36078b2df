""".ptd files: named tensors, their checks, and programs that need them."""

from __future__ import annotations

import io
import struct

import pytest

import pterun
from pterun.errors import ErrorCode, InvalidExternalData, InvalidState, NotFound
from pterun.format import DataFile, ProgramFile
from pterun.format.header import read_data_header
from tests.format import build, programs

FLOAT = build.FLOAT


def _affine_ptd(weight_layout=(FLOAT, (3, 4), (0, 1)), bias_layout=(FLOAT, (3,), (0,)), weight_bytes=48):
    return build.data_file([
        ("fc.weight", bytes(range(weight_bytes)), weight_layout),
        ("fc.bias", bytes(12), bias_layout),
    ])


def test_exported_data_file(external):
    df = DataFile(external.ptd[0])
    assert sorted(df.keys()) == ["fc.bias", "fc.weight"]
    weight = df.get("fc.weight")
    assert (weight.layout.scalar_type, weight.layout.sizes, weight.layout.dim_order) == (FLOAT, (3, 4), (0, 1))
    assert len(weight.data) == weight.layout.nbytes == 48
    with pytest.raises(NotFound, match="'fc.other'"):
        df.get("fc.other")


@pytest.mark.parametrize("kind", ["path", "str", "bytes", "memoryview", "file object"])
def test_data_file_sources(external, kind):
    path = external.ptd[0]
    source = {
        "path": path, "str": str(path), "bytes": path.read_bytes(), "memoryview": memoryview(path.read_bytes()),
        "file object": io.BytesIO(path.read_bytes()),
    }[kind]
    assert sorted(DataFile(source).keys()) == ["fc.bias", "fc.weight"]


def test_program_with_external_constants_runs(external):
    import torch

    x = external.forward_inputs()[0]
    eager = programs._seeded(programs.Affine)
    for data_path in (external.ptd[0], str(external.ptd[0]), external.ptd[0].read_bytes(), [external.ptd[0]]):
        program = pterun.Runtime.get().load_program(external.pte, data_path=data_path)
        assert torch.allclose(program.load_method("forward").execute([x])[0], eager(x), atol=1e-6)


def test_external_constants_are_not_in_the_program(external):
    pf = ProgramFile(external.pte)
    tensors = [v for v in pf.plan("forward").values if getattr(v, "external", False)]
    assert sorted(t.fqn for t in tensors) == ["fc.bias", "fc.weight"]
    assert all(t.memory_id is None for t in tensors)
    assert len(pf._constant_offsets) <= 1


def test_program_needing_constants_from_a_data_file_loaded_without_one(external):
    program = pterun.Runtime.get().load_program(external.pte)
    with pytest.raises(InvalidState, match="stored in a data file") as info:
        program.load_method("forward")
    assert info.value.code == ErrorCode.InvalidState


def test_planned_external_tensors_without_a_data_file(trainable_external):
    pf = ProgramFile(trainable_external.pte)
    planned = [v for v in pf.plan("forward").values if getattr(v, "external", False) and v.memory_id is not None]
    assert planned, "the training program should plan its external weights"
    program = pterun.Runtime.get().load_program(trainable_external.pte)
    with pytest.raises(InvalidExternalData, match="stored in a data file") as info:
        program.load_method("forward")
    assert info.value.code == ErrorCode.InvalidExternalData


def test_planned_external_tensors_are_copied_in(trainable_external):
    import torch

    program = pterun.Runtime.get().load_program(trainable_external.pte, data_path=trainable_external.ptd)
    method = program.load_method("forward")
    weight = method.get_attribute("fc.weight")
    expected = programs._seeded(programs.Trainable).fc.weight
    assert torch.equal(weight, expected.detach())
    weight.add_(1.0)  # planned: the method's copy, not the file's bytes
    again = pterun.Runtime.get().load_program(trainable_external.pte, data_path=trainable_external.ptd)
    assert torch.equal(again.load_method("forward").get_attribute("fc.weight"), expected.detach())


@pytest.mark.parametrize(
    "kwargs, what",
    [
        ({"weight_layout": (FLOAT, (4, 3), (0, 1))}, "[4, 3]"),
        ({"weight_layout": (FLOAT, (3, 4), (1, 0))}, "dim order [1, 0]"),
        ({"weight_layout": (7, (3, 4), (0, 1)), "weight_bytes": 96}, "Double"),
        ({"weight_layout": (FLOAT, (12,), (0,))}, "[12]"),
    ],
)
def test_data_file_layout_mismatch_names_the_tensor(external, kwargs, what):
    program = pterun.Runtime.get().load_program(external.pte, data_path=_affine_ptd(**kwargs))
    with pytest.raises(InvalidExternalData, match="'fc.weight'") as info:
        program.load_method("forward")
    assert info.value.code == ErrorCode.InvalidExternalData
    assert what in info.value.message


def test_planned_external_layout_mismatch(trainable_external):
    data = build.data_file([
        ("fc.weight", bytes(16), (FLOAT, (4,), (0,))),
        ("fc.bias", bytes(8), (FLOAT, (2,), (0,))),
    ])
    program = pterun.Runtime.get().load_program(trainable_external.pte, data_path=data)
    with pytest.raises(InvalidExternalData, match="'fc.weight'"):
        program.load_method("forward")


def test_data_file_without_the_tensor(external):
    data = build.data_file([("fc.bias", bytes(12), (FLOAT, (3,), (0,)))])
    program = pterun.Runtime.get().load_program(external.pte, data_path=data)
    with pytest.raises(NotFound, match="'fc.weight' is in none of the data files"):
        program.load_method("forward")


def test_segment_shorter_than_its_tensor_layout():
    with pytest.raises(InvalidExternalData, match="'fc.weight' is 48 bytes .*its segment holds 40"):
        DataFile(_affine_ptd(weight_bytes=40))


def test_data_without_layout_too_short_for_the_constant(external):
    data = build.data_file([("fc.weight", bytes(40), None), ("fc.bias", bytes(12), None)])
    program = pterun.Runtime.get().load_program(external.pte, data_path=data)
    with pytest.raises(InvalidExternalData, match="'fc.weight' needs 48 bytes"):
        program.load_method("forward")


def test_data_file_version():
    assert DataFile(build.data_file([("k", b"abcd", None)])).keys() == ["k"]
    with pytest.raises(InvalidExternalData, match="version is 1"):
        DataFile(build.data_file([("k", b"abcd", None)], version=1))


def test_data_file_flatbuffer_is_verified():
    data = bytearray(build.data_file([("k", b"abcd", None)]))
    struct.pack_into("<I", data, 0, 0xFFF0)
    with pytest.raises(InvalidExternalData, match="FlatTensor verification failed"):
        DataFile(bytes(data))


def _segment_field(data: bytes, field: str) -> int:
    from pterun.format._generated import flat_tensor_generated as ft

    seg = ft.FlatTensor.GetRootAs(data, 0).Segments(0)
    return seg._tab.Pos + seg._tab.Offset({"offset": 4, "size": 6}[field])


def test_data_file_segment_past_end():
    data = bytearray(build.data_file([("k", b"abcdefgh", None)]))
    struct.pack_into("<Q", data, _segment_field(bytes(data), "size"), 1 << 20)
    with pytest.raises(InvalidExternalData, match="segment 0 spans bytes"):
        DataFile(bytes(data))


def test_data_file_segment_index_out_of_range():
    from pterun.format._generated import flat_tensor_generated as ft

    data = bytearray(build.data_file([("k", b"abcdefgh", None), ("j", b"ijklmnop", None)]))
    nd = ft.FlatTensor.GetRootAs(bytes(data), 0).NamedData(1)  # segment_index 1: written, unlike a default 0
    struct.pack_into("<I", data, nd._tab.Pos + nd._tab.Offset(6), 3)
    with pytest.raises(InvalidExternalData, match="names segment 3; the file has 2"):
        DataFile(bytes(data))


def test_data_header_sizes_of_built_file():
    data = build.data_file([("k", b"abcdefgh", None)])
    header = read_data_header(memoryview(data))
    assert header.segment_base_offset + header.segment_data_size == len(data)


def test_same_key_in_two_data_files(external):
    with pytest.raises(pterun.errors.InvalidArgument, match="more than one data file"):
        pterun.Runtime.get().load_program(external.pte, data_path=[external.ptd[0], external.ptd[0]])
