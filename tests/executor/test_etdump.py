"""ETDump: the events and values pterun records, against the ones ExecuTorch's runtime records for the same
program, and the calls around them (writing, draining, a full debug buffer, a program without ETDump).

ETDump's home: this file and test_etdump_calls.py (the switches, against ExecuTorch's). What needs a GPU is in
one file where scripts/gpu-tests.sh collects GPU tests, tests/gpu/test_etdump_on_cuda.py (CUDA events, values
read back from the device, an XNNPACK delegate's nodes timed on the GPU). Elsewhere, each where its layer is:
a delegate's own node events (tests/backends/xnnpack/test_xnnpack_profile.py,
tests/backends/webgpu/test_webgpu_profile.py), ExecuTorch's Inspector reading pterun's dumps (tests/devtools/),
`pterun profile` (tests/cli/test_profile.py) and ExecuTorch's own tests run on pterun (tests/peer/)."""

from __future__ import annotations

import threading

import pytest
import torch
from torch.export import Dim

from pterun import Runtime, pybindings
from pterun.core.dtype import to_torch
from pterun.errors import ErrorCode, InvalidArgument, InvalidState, MemoryAllocationFailed
from pterun.format.etdump import DebugEvent, ProfileEvent, TensorEntry, read_etdump
from tests.executor.programs import add_mul, dynamic_add_mul
from tests.support.exporting import ExportSpec, export_program

portable_lib = pytest.importorskip("executorch.extension.pybindings.portable_lib")

DEBUG = 1 << 16


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)

    def forward(self, x):
        h = torch.sigmoid(self.a(x)) * 2
        return torch.relu(self.b(h)), h.sum(dim=-1)


class Buffered(torch.nn.Module):
    """A mutable buffer, updated in place each call, and a split whose out argument is a list."""

    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(4))

    def forward(self, x):
        self.count.add_(x.sum(0))
        first, second = torch.split(x * self.count, 2, dim=1)
        return first + 1, second


class SizeScaled(torch.nn.Module):
    """Reads its dynamic batch size (aten::sym_size.int, a prim op) and computes with it."""

    def forward(self, x):
        return x * x.shape[0], x.new_ones(x.shape[0], 2) * 3


def size_scaled():
    batch = Dim("batch", min=1, max=8)
    return export_program("etdump-size-scaled",
                          lambda: ExportSpec(SizeScaled(), (torch.randn(3, 4),), dynamic_shapes=({0: batch},)))


def mlp():
    torch.manual_seed(0)
    return export_program("etdump-mlp", lambda: ExportSpec(Mlp(), (torch.randn(3, 8),)))


def buffered():
    return export_program("etdump-buffered", lambda: ExportSpec(Buffered(), (torch.randn(3, 4),)))


def _shape(event):
    """An event without its times and buffer offsets: what both runtimes must agree on."""
    if isinstance(event, ProfileEvent):
        return ("P", event.name, event.chain, event.instruction, event.delegate_id, event.delegate_name)
    value = event.value
    if isinstance(value, TensorEntry):
        value = ("tensor", value.scalar_type, value.sizes, value.strides)
    elif isinstance(value, tuple):
        value = tuple(("tensor", t.scalar_type, t.sizes, t.strides) for t in value)
    return ("D", value, event.chain, event.instruction, event.output)


def _tensor(buffer: bytes, entry: TensorEntry) -> torch.Tensor:
    dtype = to_torch(entry.scalar_type)
    n = 1
    for s in entry.sizes:
        n *= s
    raw = torch.frombuffer(bytearray(buffer[entry.offset: entry.offset + n * dtype.itemsize]), dtype=torch.uint8)
    return raw.view(dtype).as_strided(entry.sizes, entry.strides)


def _run_both(tmp_path, exported, calls: list[tuple]):
    """Runs ``calls`` on ExecuTorch's module and on pterun's, each with ETDump and a debug buffer; returns the
    two (blocks, debug buffer) pairs."""
    results = []
    for name, load in (("executorch", portable_lib._load_for_executorch), ("pterun", pybindings._load_for_executorch)):
        module = load(str(exported.pte), enable_etdump=True, debug_buffer_size=DEBUG)
        assert module.has_etdump()
        for inputs in calls:
            module.forward(list(inputs))
        etdump, debug = tmp_path / f"{name}.etdp", tmp_path / f"{name}.bin"
        module.write_etdump_result_to_file(str(etdump), str(debug))
        results.append((read_etdump(etdump.read_bytes()), debug.read_bytes()))
    return results


@pytest.mark.parametrize("program", [add_mul, dynamic_add_mul, size_scaled, mlp, buffered])
def test_events_and_values_are_executorchs(tmp_path, program):
    exported = program()
    inputs = exported.forward_inputs()
    (theirs, their_debug), (ours, our_debug) = _run_both(tmp_path, exported, [inputs, inputs])
    assert [b.name for b in theirs] == ["Default", "Execute", "Execute"]
    assert any(isinstance(e, DebugEvent) for e in theirs[1].events), "ExecuTorch logged no values: no premise"
    assert [b.name for b in ours] == [b.name for b in theirs]
    for mine, reference in zip(ours, theirs):
        assert [_shape(e) for e in mine.events] == [_shape(e) for e in reference.events], mine.name
        for a, b in zip(mine.events, reference.events):
            if isinstance(a, ProfileEvent):
                assert a.start <= a.end
            elif isinstance(a.value, TensorEntry):
                torch.testing.assert_close(_tensor(our_debug, a.value), _tensor(their_debug, b.value),
                                           rtol=1e-5, atol=1e-6)


def test_prim_ops_record_no_kernel_event(tmp_path):
    # A dynamic program reads sizes with aten::sym_size.int, one of ExecuTorch's prim ops: OPERATOR_CALL only.
    exported = size_scaled()
    program = Runtime.get().load_program(exported.pte, enable_etdump=True)
    method = program.load_method("forward")
    names = [step.name for step in method.steps if hasattr(step, "binding")]
    assert "aten::sym_size.int" in names, "no prim op in the program: no premise"
    method.execute(exported.forward_inputs())
    program.write_etdump_result_to_file(tmp_path / "d.etdp")
    events = read_etdump((tmp_path / "d.etdp").read_bytes())[-1].events
    assert not any(isinstance(e, DebugEvent) for e in events)  # no debug buffer, no values
    kernels = [e.name for e in events if e.name and e.name.startswith("native_call_")]
    assert "native_call_sym_size.int" not in kernels and "native_call_mul.out" in kernels
    assert sum(e.name == "OPERATOR_CALL" for e in events) == len(method.plan.instructions)


def test_profiling_off_adds_nothing_to_the_method():
    exported = mlp()
    plain = Runtime.get().load_program(exported.pte).load_method("forward")
    traced = Runtime.get().load_program(exported.pte, enable_etdump=True).load_method("forward")
    assert "_now" in traced.source and "_begin" in traced.source
    assert "_now" not in plain.source and "_begin" not in plain.source and "_ev" not in plain.source
    torch.testing.assert_close(plain.execute(exported.forward_inputs()), traced.execute(exported.forward_inputs()))


def test_write_drains_what_was_recorded(tmp_path):
    exported = add_mul()
    program = Runtime.get().load_program(exported.pte, enable_etdump=True)
    assert program.has_etdump()
    method = program.load_method("forward")
    method.execute(exported.forward_inputs())
    program.write_etdump_result_to_file(tmp_path / "1.etdp")
    method.execute(exported.forward_inputs())
    program.write_etdump_result_to_file(tmp_path / "2.etdp")
    assert [b.name for b in read_etdump((tmp_path / "1.etdp").read_bytes())] == ["Default", "Execute"]
    assert [b.name for b in read_etdump((tmp_path / "2.etdp").read_bytes())] == ["Execute"]
    program.write_etdump_result_to_file(tmp_path / "3.etdp")  # nothing since: nothing written, as ExecuTorch does
    assert not (tmp_path / "3.etdp").exists()


def test_writing_without_etdump_is_invalid_state(tmp_path):
    exported = add_mul()
    program = Runtime.get().load_program(exported.pte)
    module = pybindings._load_for_executorch(str(exported.pte))
    assert not program.has_etdump() and not module.has_etdump()
    for target in (program, module, pybindings._load_program(str(exported.pte))):
        with pytest.raises(InvalidState, match="enable_etdump") as info:
            target.write_etdump_result_to_file(str(tmp_path / "x.etdp"))
        assert info.value.code == ErrorCode.InvalidState
    assert not (tmp_path / "x.etdp").exists()
    torch.testing.assert_close(module.forward(list(exported.forward_inputs())),
                               list(add_mul_reference(exported)))


def add_mul_reference(exported):
    x, y = exported.forward_inputs()
    return x + y, x * y


def test_a_full_debug_buffer_fails_the_call_not_the_process(tmp_path):
    exported = mlp()
    inputs = exported.forward_inputs()
    program = Runtime.get().load_program(exported.pte, enable_etdump=True, debug_buffer_size=300)
    method = program.load_method("forward")
    expected = Runtime.get().load_program(exported.pte).load_method("forward").execute(inputs)
    for _ in range(2):  # the method still runs (and fails the same way) after a failure
        with pytest.raises(MemoryAllocationFailed, match="debug buffer of 300 bytes is full") as info:
            method.execute(inputs)
        assert info.value.code == ErrorCode.MemoryAllocationFailed
        torch.testing.assert_close(method.get_outputs(), expected)  # the call's outputs were computed
    program.write_etdump_result_to_file(tmp_path / "d.etdp", tmp_path / "d.bin")
    blocks = read_etdump((tmp_path / "d.etdp").read_bytes())
    assert [b.name for b in blocks] == ["Default", "Execute", "Execute"]
    logged = [e for e in blocks[1].events if isinstance(e, DebugEvent)]
    assert logged and all(e.value.offset + 4 <= 300 for e in logged)  # the values that fit were kept
    assert (tmp_path / "d.bin").stat().st_size == 300
    # A program with room for the values gives the eager result.
    roomy = Runtime.get().load_program(exported.pte, enable_etdump=True, debug_buffer_size=DEBUG)
    torch.testing.assert_close(roomy.load_method("forward").execute(inputs), expected)


def test_bad_debug_buffer_sizes_are_refused():
    exported = add_mul()
    with pytest.raises(InvalidArgument, match="debug_buffer_size"):
        Runtime.get().load_program(exported.pte, enable_etdump=True, debug_buffer_size=-1)
    with pytest.raises(TypeError, match="debug_buffer_size"):
        pybindings._load_for_executorch(str(exported.pte), enable_etdump=True, debug_buffer_size=-4)


def test_methods_running_at_once_record_whole_blocks(tmp_path):
    exported = mlp()
    program = Runtime.get().load_program(exported.pte, enable_etdump=True, debug_buffer_size=1 << 20)
    methods = [program.load_method("forward", cached=False) for _ in range(2)]
    errors = []
    inputs = exported.forward_inputs()
    runs = 20

    def work(method):
        try:
            for _ in range(runs):
                method.execute(inputs)
        except Exception as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(m,)) for m in methods]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    program.write_etdump_result_to_file(tmp_path / "d.etdp", tmp_path / "d.bin")
    blocks = read_etdump((tmp_path / "d.etdp").read_bytes())
    executes = [b for b in blocks if b.name == "Execute"]
    assert len(executes) == 2 * runs
    shapes = {tuple(_shape(e) for e in b.events) for b in executes}
    assert len(shapes) == 1  # every block whole, none interleaved with another
    debug = (tmp_path / "d.bin").read_bytes()
    outputs = [e for b in executes for e in b.events if isinstance(e, DebugEvent) and e.output]
    expected = methods[0].execute(inputs)
    assert len(outputs) == 2 * runs * 2
    for event in outputs[::2]:
        torch.testing.assert_close(_tensor(debug, event.value), expected[0])


def test_compile_gives_way_to_profiling():
    exported = add_mul()
    method = Runtime.get().load_program(exported.pte, enable_etdump=True, compile=True).load_method("forward")
    assert "profiling" in method.compile_status
