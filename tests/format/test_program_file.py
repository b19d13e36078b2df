"""ProgramFile: sources, version, verification levels, constants, mutable data, delegate blobs and named data."""

from __future__ import annotations

import io
import struct

import pytest

from pterun.errors import AccessFailed, ErrorCode, InvalidArgument, InvalidProgram, NotFound, NotSupported
from pterun.format import ProgramFile, Verification
from pterun.format.header import read_program_header
from tests.format import build, programs

LEVELS = [Verification.Minimal, Verification.InternalConsistency]


# -- sources --------------------------------------------------------------------------------------------


def _sources(path):
    data = path.read_bytes()
    return {
        "path": path,
        "str": str(path),
        "bytes": data,
        "bytearray": bytearray(data),
        "memoryview": memoryview(data),
        "memoryview of words": memoryview(bytearray(data)).cast("I") if len(data) % 4 == 0 else memoryview(data),
        "file object": io.BytesIO(data),
        "open file": open(path, "rb"),
    }


@pytest.mark.parametrize(
    "kind", ["path", "str", "bytes", "bytearray", "memoryview", "memoryview of words", "file object", "open file"]
)
def test_every_source_reads_the_same_program(affine, kind):
    sources = _sources(affine.pte)
    try:
        pf = ProgramFile(sources[kind])
        assert pf.method_names == ("forward",)
        assert bytes(pf.constant(1, 48)) == bytes(ProgramFile(affine.pte.read_bytes()).constant(1, 48))
    finally:
        sources["open file"].close()


def test_path_is_memory_mapped_copy_on_write(affine):
    import mmap

    pf = ProgramFile(affine.pte)
    assert isinstance(pf.file.owner, mmap.mmap)
    assert not pf.file.data.readonly  # tensors may view it; writes never reach the file
    before = affine.pte.read_bytes()
    view = pf.constant(1, 4)
    view[0] ^= 0xFF
    assert affine.pte.read_bytes() == before


def test_bytes_source_is_not_copied(affine):
    data = affine.pte.read_bytes()
    pf = ProgramFile(data)
    assert pf.file.owner is data
    assert pf.file.data.readonly


def test_missing_file(tmp_path):
    with pytest.raises(AccessFailed, match="does not exist") as info:
        ProgramFile(tmp_path / "missing.pte")
    assert info.value.code == ErrorCode.AccessFailed


def test_directory_is_not_readable(tmp_path):
    with pytest.raises(AccessFailed):
        ProgramFile(tmp_path)


@pytest.mark.parametrize("kind", ["path", "bytes", "file object"])
def test_empty_file(tmp_path, kind):
    path = tmp_path / "empty.pte"
    path.write_bytes(b"")
    source = {"path": path, "bytes": b"", "file object": io.BytesIO(b"")}[kind]
    with pytest.raises(InvalidProgram, match="0 bytes"):
        ProgramFile(source)


def test_unsupported_source_type():
    with pytest.raises(InvalidArgument, match="int"):
        ProgramFile(42)


# -- version and verification ---------------------------------------------------------------------------


@pytest.mark.parametrize("level", LEVELS)
def test_version_zero_is_read(level):
    assert ProgramFile(build.program([build.identity()]), level).version == 0


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("version", [1, 2, 0xFFFFFFFF])
def test_later_versions_are_rejected(level, version):
    with pytest.raises(InvalidProgram, match=f"version is {version}"):
        ProgramFile(build.program([build.identity()], version=version), level)


def _with_vector_past_end(data: bytes) -> bytes:
    """The first method's name string moved past the end of the buffer: a verifier must catch it."""
    from pterun.format._generated import program_generated as fb

    root = fb.Program.GetRootAs(data, 0)
    plan = root.ExecutionPlan(0)
    field = plan._tab.Pos + plan._tab.Offset(4)  # ExecutionPlan.name
    out = bytearray(data)
    struct.pack_into("<I", out, field, len(data) - field + 4)
    return bytes(out)


def test_internal_consistency_verifies_the_flatbuffer():
    data = _with_vector_past_end(build.program([build.identity()]))
    with pytest.raises(InvalidProgram, match="Program verification failed: pte.ExecutionPlan.name"):
        ProgramFile(data, Verification.InternalConsistency)


def test_minimal_skips_verification_but_still_fails_cleanly():
    data = _with_vector_past_end(build.program([build.identity()]))
    with pytest.raises(InvalidProgram, match="corrupt program"):
        ProgramFile(data, Verification.Minimal)


def test_minimal_checks_the_root_offset():
    data = bytearray(build.program([build.identity()]))
    struct.pack_into("<I", data, 0, len(data))
    with pytest.raises(InvalidProgram, match="root table offset"):
        ProgramFile(bytes(data), Verification.Minimal)
    with pytest.raises(InvalidProgram, match="verification failed"):
        ProgramFile(bytes(data), Verification.InternalConsistency)


@pytest.mark.parametrize("level", LEVELS)
def test_exported_programs_load_at_both_levels(level, stateful, sin_inline, sin_segment, external, inline_constants):
    for path in (stateful.pte, sin_inline.pte, sin_segment.pte, external.pte, inline_constants):
        pf = ProgramFile(path, level)
        assert pf.verification == level
        for name in pf.method_names:
            pf.plan(name)


# -- constants ------------------------------------------------------------------------------------------


def test_constant_segment(affine):
    pf = ProgramFile(affine.pte)
    root = pf._root
    assert root.ConstantBufferLength() == 0
    assert len(pf._constant_offsets) > 1
    weight, bias = pf.constant(1, 48), pf.constant(2, 12)
    segment = pf.segment(root.ConstantSegment().SegmentIndex())
    assert bytes(weight) == bytes(segment[pf._constant_offsets[1] :][:48])
    assert len(bias) == 12


def test_inline_constant_buffer_is_the_same_data(affine, inline_constants):
    segment, inline = ProgramFile(affine.pte), ProgramFile(inline_constants)
    assert inline._root.ConstantBufferLength() == 3 and inline._constant_segment is None
    assert inline.header.segment_base_offset == 0  # one flatbuffer, no extended header
    for idx, nbytes in [(1, 48), (2, 12)]:
        assert bytes(inline.constant(idx, nbytes)) == bytes(segment.constant(idx, nbytes))


def test_inline_constants_run_like_segment_constants(affine, inline_constants):
    import torch

    import pterun

    x = affine.forward_inputs()[0]
    runtime = pterun.Runtime.get()
    a = runtime.load_program(affine.pte).load_method("forward").execute([x])
    b = runtime.load_program(inline_constants).load_method("forward").execute([x])
    assert torch.equal(a[0], b[0])
    assert torch.allclose(a[0], programs._seeded(programs.Affine)(x), atol=1e-6)


@pytest.mark.parametrize("level", LEVELS)
def test_both_constant_storages_are_rejected(level):
    data = build.program(
        [build.add_constant(build.Tensor(data_buffer_idx=1))], constant_buffers=[b"", build.floats(1, 2)],
        constant_segment=(0, [0, 0]), segments=[build.floats(1, 2)],
    )
    with pytest.raises(InvalidProgram, match="only one may be used"):
        ProgramFile(data, level)


def test_constant_past_the_buffers():
    pf = ProgramFile(build.program([build.identity()], constant_buffers=[b"", build.floats(1, 2)]))
    assert len(pf.constant(1, 8)) == 8
    with pytest.raises(InvalidArgument, match="needs 12 bytes; its buffer holds 8"):
        pf.constant(1, 12)
    with pytest.raises(InvalidArgument, match="past the program's 2 constant buffers"):
        pf.constant(2, 4)


def test_constant_past_the_segment():
    pf = ProgramFile(build.program([build.identity()], constant_segment=(0, [0, 0]), segments=[build.floats(1, 2)]))
    with pytest.raises(InvalidArgument, match="past the constant segment's 2 entries"):
        pf.constant(2, 4)
    with pytest.raises(InvalidArgument, match="overrun the 8-byte constant segment"):
        pf.constant(1, 12)


def test_constant_segment_index_out_of_range():
    data = build.program([build.identity()], constant_segment=(3, [0, 0]), segments=[build.floats(1, 2)])
    with pytest.raises(InvalidProgram, match="constant segment is segment 3; the program has 1"):
        ProgramFile(data)


def _inline_buffer_past_end(data: bytes) -> bytes:
    """Constant buffer 1's storage pointed at a length word appended after the flatbuffer, its bytes missing."""
    from pterun.format._generated import program_generated as fb

    buf = fb.Program.GetRootAs(data, 0).ConstantBuffer(1)
    field = buf._tab.Pos + buf._tab.Offset(4)  # Buffer.storage
    out = bytearray(data) + struct.pack("<II", 1000, 0)
    struct.pack_into("<I", out, field, len(data) - field)
    return bytes(out)


def test_inline_constant_outside_unverified_program():
    data = _inline_buffer_past_end(
        build.program([build.add_constant(build.Tensor(data_buffer_idx=1))], constant_buffers=[b"", build.floats(1, 2)])
    )
    with pytest.raises(InvalidProgram, match="verification failed"):
        ProgramFile(data, Verification.InternalConsistency)
    pf = ProgramFile(data, Verification.Minimal)
    with pytest.raises(InvalidProgram, match="constant buffer 1 spans bytes"):
        pf.constant(1, 8)


def test_inline_constant_outside_unverified_program_fails_method_load():
    import pterun

    data = _inline_buffer_past_end(
        build.program([build.add_constant(build.Tensor(data_buffer_idx=1))], constant_buffers=[b"", build.floats(1, 2)])
    )
    program = pterun.Runtime.get().load_program(data, verification=Verification.Minimal)
    with pytest.raises(InvalidProgram, match="constant buffer 1 spans bytes"):
        program.load_method("forward")


# -- mutable data ---------------------------------------------------------------------------------------


def test_mutable_data_segment_holds_initial_values(stateful):
    pf = ProgramFile(stateful.pte)
    assert len(pf._mutable) == 1
    plan = pf.plan("forward")
    state = [v for v in plan.values if getattr(v, "memory_id", None) is not None and v.data_buffer_idx > 0]
    assert len(state) == 1
    initial = struct.unpack("<4f", bytes(pf.mutable_initial_value(state[0].data_buffer_idx, 16)))
    assert initial == (1.0, 2.0, 3.0, 4.0)


def test_mutable_initial_values_are_loaded_and_advanced(stateful):
    import torch

    import pterun

    x = stateful.inputs["forward"][0]
    eager = programs._seeded(programs.Stateful)
    method = pterun.Runtime.get().load_program(stateful.pte).load_method("forward")
    for _ in range(3):
        assert torch.allclose(method.execute([x])[0], eager(x), atol=1e-6)


def test_mutable_initial_value_errors(stateful):
    pf = ProgramFile(stateful.pte)
    with pytest.raises(NotFound, match="past the mutable data segment's 2 entries"):
        pf.mutable_initial_value(2, 4)
    with pytest.raises(InvalidArgument, match="overrun the 16-byte mutable data segment"):
        pf.mutable_initial_value(1, 20)
    with pytest.raises(NotFound, match="no mutable data segments"):
        ProgramFile(build.program([build.identity()])).mutable_initial_value(1, 4)


def test_mutable_data_segment_index_out_of_range():
    with pytest.raises(InvalidProgram, match="mutable data segment is segment 5"):
        ProgramFile(build.program([build.identity()], mutable=[(5, [0, 0])], segments=[b"x" * 8]))


# -- delegates and named data ---------------------------------------------------------------------------


def test_inline_delegate_blob(sin_inline):
    pf = ProgramFile(sin_inline.pte)
    (delegate,) = pf.plan("forward").delegates
    assert delegate.backend_id == "SinDelegate" and delegate.inline
    assert bytes(pf.delegate_data(delegate.inline, delegate.index)) == programs.BLOB_MAGIC


def test_segment_delegate_blob(sin_segment):
    pf = ProgramFile(sin_segment.pte)
    (delegate,) = pf.plan("forward").delegates
    assert not delegate.inline
    assert pf._root.BackendDelegateDataLength() == 0
    assert bytes(pf.delegate_data(delegate.inline, delegate.index)) == programs.BLOB_MAGIC


def test_delegate_blob_references_out_of_range(sin_inline, sin_segment):
    with pytest.raises(InvalidProgram, match="past the program's 1 inline blobs"):
        ProgramFile(sin_inline.pte).delegate_data(True, 1)
    with pytest.raises(InvalidProgram, match="delegate data is segment 7"):
        ProgramFile(sin_segment.pte).delegate_data(False, 7)


@pytest.mark.parametrize("offset", [1 << 16, 0x7FFFFFF0])
def test_inline_delegate_blobs_of_unverified_program(offset):
    from pterun.format._generated import program_generated as fb

    data = bytearray(build.program([build.identity(delegates=[("B", 0, 0)])], delegate_data=[b"blob"]))
    root = fb.Program.GetRootAs(bytes(data), 0)
    struct.pack_into("<I", data, root._tab.Pos + root._tab.Offset(10), offset)  # Program.backend_delegate_data
    pf = ProgramFile(bytes(data), Verification.Minimal)
    with pytest.raises(InvalidProgram, match="inline delegate data 0 is corrupt"):
        pf.delegate_data(True, 0)


def test_named_data_in_program(sin_segment, sin_inline):
    for exported in (sin_segment, sin_inline):
        pf = ProgramFile(exported.pte)
        assert list(pf.named_data) == [programs.SCALE_KEY]
        assert struct.unpack("<f", bytes(pf.named_data[programs.SCALE_KEY])) == (programs.SCALE,)


@pytest.mark.parametrize("inline", [True, False])
def test_delegated_program_runs(inline):
    import torch

    from pterun.runtime import Runtime

    exported = programs.delegated(inline)
    x = exported.forward_inputs()[0]
    out = Runtime(programs.sin_backend_registries()).load_program(exported.pte).load_method("forward").execute([x])
    eager = programs._seeded(programs.SinModel)
    assert torch.allclose(out[0], eager.fc(torch.sin(x) * programs.SCALE), atol=1e-6)


def test_named_data_errors():
    with pytest.raises(InvalidProgram, match="appears twice"):
        ProgramFile(build.program([build.identity()], named=[("k", 0), ("k", 0)], segments=[b"abcd"]))
    with pytest.raises(InvalidProgram, match="named data 'k' is segment 1"):
        ProgramFile(build.program([build.identity()], named=[("k", 1)], segments=[b"abcd"]))


def test_segment_past_end_of_file():
    data = build.program([build.identity()], named=[("k", 0)], segments=[b"x" * 32])
    header = read_program_header(memoryview(data))
    out = bytearray(data)
    struct.pack_into("<Q", out, 32, 0)  # no data size: the segment itself is what is checked
    with pytest.raises(InvalidProgram, match="segment 0 spans bytes"):
        ProgramFile(bytes(out[: header.segment_base_offset + 16]))


def test_unknown_method():
    pf = ProgramFile(build.program([build.identity()]))
    with pytest.raises(InvalidArgument, match="no method named 'backward'"):
        pf.plan("backward")


# -- plans: every index and enum is checked -------------------------------------------------------------


def _plan_error(plan: build.Plan, **program_kwargs):
    pf = ProgramFile(build.program([plan], **program_kwargs))
    with pytest.raises((InvalidProgram, NotSupported)) as info:
        pf.plan(plan.name)
    return info.value


@pytest.mark.parametrize(
    "plan, message",
    [
        (build.identity(inputs=[1]), "an input refers to value 1"),
        (build.identity(outputs=[-1]), "an output refers to value -1"),
        (build.identity(buffer_sizes=[0, -8]), "negative size"),
        (build.identity(buffer_sizes=[0, 4]), "overrun arena 1 of 4 bytes"),
        (build.identity(values=[build.Tensor(memory=(2, 0))]), "memory_id 2 is not one of the plan's 1 arenas"),
        (build.identity(values=[build.Tensor(memory=(0, 0))]), "memory_id 0"),
        (build.identity(values=[build.Tensor(memory=(1, 0), scalar_type=19)]), "scalar type 19"),
        (build.identity(values=[build.Tensor(memory=(1, 0), sizes=(-2,))]), "negative size"),
        (build.identity(values=[build.Tensor(memory=(1, 0), dim_order=(1,))]), "not a permutation"),
        (build.identity(values=[build.Tensor(memory=(1, 0), dynamism=3)]), "shape dynamism 3"),
        (build.identity(values=[build.Tensor(memory=(1, 0), dynamism=2)]), "unbounded dynamic"),
        (build.identity(values=[build.Tensor(memory=(1, 0), external=True)]), "no fully qualified name"),
        (build.identity(values=[build.Tensor(memory=(1, 0), location=2)]), "data location 2"),
        (build.identity(values=[build.Tensor(memory=(1, 0), device=(7, 0))]), "device type 7"),
        (build.identity(values=[build.Tensor(memory=(1, 0), device=(1, -1))]), "device index -1"),
        (build.identity(buffer_devices=[(1, 9, 0)]), "device type 9"),
        (build.identity(buffer_devices=[(2, 1, 0)]), "device tag for buffer 2"),
        (build.identity(values=[("raw", 12)]), "unknown value kind 12"),
        (build.identity(instructions=[("kernel", 0, [0])]), "calls operator 0 of 0"),
        (build.identity(instructions=[("delegate", 0, [0])]), "calls delegate 0 of 0"),
        (build.identity(instructions=[("move", 0, 3)]), "refers to value 3"),
        (build.identity(instructions=[("jump", 0, 5)]), "jumps to 5"),
        (build.identity(instructions=[("free", 9)]), "refers to value 9"),
        (build.identity(delegates=[("B", 2, 0)]), "data location 2"),
    ],
)
def test_plan_checks(plan, message):
    assert message in _plan_error(plan).message


def test_sizes_whose_strides_overflow_are_rejected():
    # numel is 0, but the outermost stride of this tensor is about 2**93 elements.
    plan = build.Plan(values=[build.Tensor(sizes=(0, 0x7FFFFFFF, 0x7FFFFFFF, 0x7FFFFFFF))], inputs=[0], outputs=[0])
    assert "overflow a 64-bit byte count" in _plan_error(plan).message


def test_zero_sized_tensor_is_fine():
    plan = build.Plan(values=[build.Tensor(sizes=(0, 1 << 20, 3))], inputs=[0], outputs=[0])
    pf = ProgramFile(build.program([plan]))
    assert pf.plan("forward").values[0].nbytes == 0
