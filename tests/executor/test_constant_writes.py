"""No step of a method may write a constant: such a program is refused at load, whatever the verification level.

Constants view the program's bytes (or a data file's) without a copy: memory
the caller lent, immutable ``bytes`` or a read-only map, that every method of
the program shares. A corrupted index can point a kernel's ``out`` at one;
pterun must then refuse the method, naming the instruction, its operator and
the value, and never write the caller's memory (nor fault on a read-only
map). Writes through anything that may be a constant count too: a value a
``MoveCall`` moved a constant into, a view of a constant, a list's items.
Valid programs, whose delegates and kernels declare precisely what they
write, still load (the differential corpus checks that at scale).
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import pterun
from pterun import Verification
from pterun.backends import BackendInterface, default_backend_registry
from pterun.errors import InvalidProgram
from pterun.executor import Registries
from pterun.format import ProgramFile
from pterun.kernels import default_registry, fixed_arity
from pterun.runtime import default_allocators
from tests.executor import corrupt
from tests.format import build
from tests.support.exporting import ExportSpec, export_program

REPO = Path(__file__).resolve().parents[2]
LEVELS = (Verification.Minimal, Verification.InternalConsistency)


class TwoLinear(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc1, self.fc2 = torch.nn.Linear(16, 8), torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class Split(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4, 6))

    def forward(self, x):
        a, b = torch.split(x * self.w, 3, dim=1)
        return a + b


@pytest.fixture(scope="module")
def linear():
    exported = export_program("trust-two-linear", lambda: ExportSpec(TwoLinear(), (torch.randn(2, 16),)))
    return exported.pte.read_bytes(), exported.forward_inputs()


def _out_at_weight(data: bytes) -> tuple[bytes, int, int]:
    """The program with the first addmm's out retargeted at a constant: (bytes, instruction, constant)."""
    addmm = corrupt.call(data, "aten::addmm.out")
    constant = corrupt.constants(data)[0]
    assert constant not in addmm.args  # premise: a real change of meaning
    return corrupt.retarget(data, addmm.positions[-2], constant), addmm.instruction, constant


def _refused(data, *, data_path=None, runtime=None, level=Verification.InternalConsistency) -> InvalidProgram:
    program = (runtime or pterun.Runtime.get()).load_program(data, data_path=data_path, verification=level)
    with pytest.raises(InvalidProgram) as info:
        program.load_method("forward")
    # A failed load leaves nothing behind: asked again, the program gives the same answer.
    with pytest.raises(InvalidProgram) as again:
        program.load_method("forward")
    assert str(again.value) == str(info.value)
    assert info.value.code == 0x23
    return info.value


def _still_works(runtime=None) -> None:
    """The runtime that refused a program loads and runs a valid one."""
    plan = build.add_constant(build.Tensor(data_buffer_idx=1))
    data = build.program([plan], constant_buffers=[b"", build.floats(1, 2)])
    (out,) = (runtime or pterun.Runtime.get()).load_program(data).load_method("forward").execute([torch.ones(2)])
    assert torch.equal(out, torch.tensor([2.0, 3.0]))


@pytest.mark.parametrize("level", LEVELS, ids=lambda v: v.name)
def test_out_retargeted_at_a_constant_is_refused_and_the_bytes_stay_as_they_were(linear, level):
    data, inputs = linear
    corrupted, instruction, constant = _out_at_weight(data)
    digest = hashlib.sha256(corrupted).digest()
    error = _refused(corrupted, level=level)
    message = str(error)
    assert f"instruction {instruction} (aten::addmm.out)" in message and f"value {constant}, a constant" in message
    assert hashlib.sha256(corrupted).digest() == digest
    # The unmodified program still loads and computes what the module does.
    (out,) = pterun.Runtime.get().load_program(data).load_method("forward").execute(list(inputs))
    torch.testing.assert_close(out, TwoLinear()(*inputs))


def test_out_retargeted_at_a_constant_of_a_read_only_map_is_refused(linear, tmp_path):
    """The same program from a read-only memory map: refused, in a process of its own (a write would fault)."""
    corrupted, instruction, _ = _out_at_weight(linear[0])
    path = tmp_path / "corrupted.pte"
    path.write_bytes(corrupted)
    script = textwrap.dedent(f"""
        import mmap, torch
        import pterun
        from pterun.errors import PteError
        f = open({str(path)!r}, "rb")
        data = memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))
        for level in (pterun.Verification.Minimal, pterun.Verification.InternalConsistency):
            try:
                method = pterun.Runtime.get().load_program(data, verification=level).load_method("forward")
                method.execute([torch.randn(2, 16)])
                print("loaded")
            except PteError as exc:
                print(type(exc).__name__, hex(exc.code), exc)
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=REPO,
                          check=False)
    assert done.returncode == 0, f"exit status {done.returncode}: {done.stderr[-2000:]}"
    lines = done.stdout.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith("InvalidProgram 0x23") for line in lines), done.stdout
    assert all(f"instruction {instruction} (aten::addmm.out)" in line for line in lines)


def test_a_list_item_retargeted_at_a_constant_is_refused():
    """split_with_sizes_copy's out is a list of tensors; one item becomes the weight."""
    exported = export_program("trust-split", lambda: ExportSpec(Split(), (torch.randn(4, 6),)))
    data = exported.pte.read_bytes()
    plan = ProgramFile(data).plan("forward")
    split = corrupt.call(data, "aten::split_with_sizes_copy.out")
    out_list = plan.values[split.args[3]]
    (weight,) = corrupt.constants(data)
    # The list's first item, in the file: find it by its value among the TensorList items.
    position = _list_item_position(data, split.args[3], 0)
    assert out_list.items[0] != weight
    error = _refused(corrupt.retarget(data, position, weight))
    assert f"instruction {split.instruction} (aten::split_with_sizes_copy.out)" in str(error)
    assert f"value {weight}" in str(error)
    _still_works()


def _list_item_position(data: bytes, list_value: int, item: int) -> int:
    from pterun.format._generated import program_generated as fb

    plan = fb.Program.GetRootAs(data, 0).ExecutionPlan(0)
    evalue = plan.Values(list_value)
    assert evalue.ValType() == fb.KernelTypes.TensorList
    table = evalue.Val()
    tensors = fb.TensorList()
    tensors.Init(table.Bytes, table.Pos)
    return tensors._tab.Vector(tensors._tab.Offset(4)) + 4 * item


# -- aliases of a constant, and kernels outside ATen ------------------------------------------------------

W = build.Tensor(data_buffer_idx=1)
X = build.Tensor(memory=(1, 0))
OUT = build.Tensor(memory=(1, 8))


def _program(values, instructions, operators, inputs=(0,), outputs=None, **kwargs) -> bytes:
    plan = build.Plan(values=list(values), inputs=list(inputs), outputs=list(outputs or [len(values) - 1]),
                      instructions=instructions, operators=operators, buffer_sizes=[0, 32], **kwargs.pop("plan", {}))
    return build.program([plan], constant_buffers=[b"", build.floats(1, 2)], **kwargs)


def test_a_write_through_a_moved_constant_is_refused():
    """MoveCall hands the constant to value 3; add.out then writes value 3."""
    data = _program(
        [X, W, ("int", 1), build.Tensor()],
        [("move", 1, 3), ("kernel", 0, [0, 0, 2, 3, 3])], [("aten::add", "out")],
    )
    error = _refused(data)
    assert "instruction 1 (aten::add.out) writes value 3, which may share memory with constant value 1" in str(error)
    _still_works()


def test_a_write_through_a_view_of_a_constant_is_refused():
    """et_view of the constant, then add.out into the view."""
    data = _program(
        [X, W, ("int", 2), ("int_list", [2]), build.Tensor(), ("int", 1)],
        [("kernel", 0, [1, 3, 4]), ("kernel", 1, [0, 0, 5, 4, 4])],
        [("executorch_prim::et_view", "default"), ("aten::add", "out")],
    )
    error = _refused(data)
    assert "instruction 1 (aten::add.out) writes value 4, which may share memory with constant value 1" in str(error)
    _still_works()


def test_a_view_of_a_constant_that_is_only_read_loads():
    """The same et_view, read by add.out into planned memory: a valid program, not refused."""
    data = _program(
        [X, W, ("int", 2), ("int_list", [2]), build.Tensor(), ("int", 1), OUT],
        [("kernel", 0, [1, 3, 4]), ("kernel", 1, [0, 4, 5, 6, 6])],
        [("executorch_prim::et_view", "default"), ("aten::add", "out")],
    )
    (out,) = pterun.Runtime.get().load_program(data).load_method("forward").execute([torch.ones(2)])
    assert torch.equal(out, torch.tensor([2.0, 3.0]))


def test_an_in_place_cache_update_of_a_constant_is_refused():
    """llama::update_cache writes its cache argument in place; here the cache is a constant."""
    value = build.Tensor(sizes=(1, 1, 1, 2), memory=(1, 0))
    cache = build.Tensor(sizes=(1, 1, 1, 2), data_buffer_idx=1)
    data = _program([value, cache, ("int", 0), build.Tensor(sizes=(1,), memory=(1, 8))],
                    [("kernel", 0, [0, 1, 2, 3, 3])], [("llama::update_cache", "out")])
    error = _refused(data)
    assert "instruction 0 (llama::update_cache.out) writes value 1, a constant" in str(error)
    _still_works()


def test_a_quantized_kernel_writing_a_constant_is_refused():
    """dequantize_per_tensor.out with its out at the constant."""
    q = build.Tensor(scalar_type=1, sizes=(2,), memory=(1, 0))  # int8
    data = _program(
        [q, ("double", 0.5), ("int", 0), ("int", -128), ("int", 127), ("int", 1), ("null",), W],
        [("kernel", 0, [0, 1, 2, 3, 4, 5, 6, 7, 7])], [("quantized_decomposed::dequantize_per_tensor", "out")],
    )
    error = _refused(data)
    assert "instruction 0 (quantized_decomposed::dequantize_per_tensor.out) writes value 7, a constant" in str(error)


def test_a_kernel_that_declares_no_effect_is_taken_to_write_its_arguments():
    """A kernel registered with a Binding that returns nothing and names no write would do nothing, so
    what it writes is undeclared: passed a constant, the method is refused; passed none, it runs."""
    runtime = pterun.Runtime()
    written = []
    runtime.registries.kernels.register(
        "my::scale_into.out", fixed_arity(lambda x, out: written.append(out.copy_(x * 2)), 3, "my::scale_into.out",
                                          result=False))
    error = _refused(_program([X, W, build.Tensor()], [("kernel", 0, [1, 2, 2])], [("my::scale_into", "out")]),
                     runtime=runtime)
    assert ("instruction 0 (my::scale_into.out) passes value 1, a constant, and its kernel declares neither a "
            "result nor the arguments it writes") in str(error)
    data = _program([X, OUT, ("null",)], [("kernel", 0, [0, 1, 2])], [("my::scale_into", "out")], outputs=[1])
    (out,) = runtime.load_program(data).load_method("forward").execute([torch.ones(2)])
    assert torch.equal(out, torch.full((2,), 2.0)) and written


def test_a_result_assigned_to_a_constant_is_refused():
    """et_view's result (a new tensor) assigned to the constant's value index."""
    data = _program([X, W, ("int", 2), ("int_list", [2])], [("kernel", 0, [0, 3, 1])],
                    [("executorch_prim::et_view", "default")], outputs=[0])
    error = _refused(data)
    assert "instruction 0 (executorch_prim::et_view.default) assigns value 1, a constant" in str(error)


def test_a_constant_input_is_refused():
    """Setting an input copies into it; an input that is a constant would copy into the program's bytes."""
    data = _program([W, ("int", 1), OUT], [("kernel", 0, [0, 0, 1, 2, 2])], [("aten::add", "out")])
    error = _refused(data)
    assert "input 0 is value 0, a constant" in str(error)
    _still_works()


def test_data_file_constants_are_never_written():
    """A constant in a .ptd (bytes the caller lent) as add.out's out: refused, the data untouched."""
    external = build.Tensor(fqn="w", external=True)
    ptd = build.data_file([("w", build.floats(1, 2), (build.FLOAT, (2,), (0,)))])
    before = bytes(ptd)
    data = _program([X, external, ("int", 1)], [("kernel", 0, [0, 0, 2, 1, 1])], [("aten::add", "out")],
                    outputs=[1])
    for level in LEVELS:
        error = _refused(data, data_path=[ptd], level=level)
        assert "instruction 0 (aten::add.out) writes value 1, a constant" in str(error)
    assert ptd == before
    _still_works()


# -- delegates --------------------------------------------------------------------------------------------


class _Doubler(BackendInterface):
    """out = 2 * x over arguments (x, out); says it writes only the last one when ``precise``."""

    def __init__(self, precise: bool) -> None:
        self.precise = precise

    def is_available(self) -> bool:
        return True

    def init(self, context, processed, compile_specs):
        return "doubler"

    def execute(self, handle, args: list) -> None:
        args[-1].copy_(args[0] * 2)

    def written_arguments(self, handle, args):
        return [len(args) - 1] if self.precise else super().written_arguments(handle, args)


def _runtime_with(backend: BackendInterface) -> pterun.Runtime:
    """A runtime whose "Doubler" backend is ``backend``."""
    backends = default_backend_registry()
    backends.register("Doubler", backend)
    return pterun.Runtime(Registries(default_registry(), backends, default_allocators()))


def _delegate_runtime(precise: bool) -> pterun.Runtime:
    return _runtime_with(_Doubler(precise))


def _delegated(args) -> bytes:
    return _program([X, W, OUT], [("delegate", 0, args)], [], plan={"delegates": [("Doubler", 0, 0)]},
                    delegate_data=[b"blob"])


def test_a_delegate_writing_a_constant_is_refused():
    runtime = _delegate_runtime(precise=True)
    error = _refused(_delegated([0, 1]), runtime=runtime)
    assert "instruction 0 (delegate Doubler) writes value 1, a constant" in str(error)
    _still_works(runtime)


def test_a_delegate_reading_a_constant_loads_when_its_backend_says_what_it_writes():
    (out,) = _delegate_runtime(precise=True).load_program(_delegated([1, 2])).load_method("forward").execute(
        [torch.ones(2)])
    assert torch.equal(out, torch.tensor([2.0, 4.0]))


def test_by_default_a_delegate_writes_every_argument():
    """A backend that does not say what it writes is taken to write everything: a constant argument is refused."""
    runtime = _delegate_runtime(precise=False)
    error = _refused(_delegated([1, 2]), runtime=runtime)
    assert "instruction 0 (delegate Doubler) writes value 1, a constant" in str(error)
    _still_works(runtime)


def test_a_delegate_naming_arguments_it_does_not_have_is_refused():
    class Wild(_Doubler):
        def written_arguments(self, handle, args):
            return [len(args)]

    runtime = _runtime_with(Wild(True))
    error = _refused(_delegated([1, 2]), runtime=runtime)
    assert "instruction 0 (delegate Doubler)" in str(error) and "names arguments [2] of 2" in str(error)


def test_every_built_in_kernel_declares_an_effect():
    """A kernel that returns nothing and declares no write would do nothing: it must be a missing declaration.

    The executor trusts these declarations to keep constants unwritten, so every registered kernel either
    returns its result or names the arguments it writes."""
    registry = default_registry()
    names = sorted(registry.registered_names)
    assert any(n.startswith("llama::") for n in names) and any(n.startswith("quantized_decomposed::") for n in names)
    for name in names:
        factory = registry.lookup(name)
        bindings = []
        for count in range(1, 24):
            try:
                bindings.append(factory(count))
            except InvalidProgram:
                continue
        assert bindings, f"{name}: no arity binds"
        for b in bindings:
            assert b.result is not None or b.writes or b.mutates, f"{name} declares no effect"


def test_update_cache_declares_its_cache_written():
    registry = default_registry()
    assert registry.lookup("llama::update_cache.out")(5).mutates == (1, 3)  # out too, as its schema says
    assert registry.lookup("llama::sdpa_with_kv_cache.out")(13).mutates == (3, 4, 11)
    assert registry.lookup("quantized_decomposed::choose_qparams.Tensor_out")(8).mutates == (5, 6)


def test_the_cuda_backend_reports_the_inputs_its_nested_method_updates():
    """The nested program's inputs are the outer method's tensors, so an input it writes is written outside too.

    (The nested method is loaded on the CPU here: what it writes does not depend on the device.)"""
    from pterun.backends.cuda import PterunCudaBackend, _Handle

    unplanned = build.Tensor()
    data = build.program([build.Plan(
        values=[unplanned, build.Tensor(), ("int", 1), build.Tensor()], inputs=[0, 1], outputs=[3],
        instructions=[("kernel", 0, [0, 1, 2, 0, 0]), ("kernel", 0, [0, 1, 2, 3, 3])],
        operators=[("aten::add", "out")],
    )])
    method = pterun.Runtime.get().load_program(data).load_method("forward")
    assert method.written_inputs == {0}
    backend = PterunCudaBackend()
    assert backend.written_arguments(_Handle(method, 2, [None]), [None] * 3) == [0, 2]
    with pytest.raises(InvalidProgram) as info:
        backend.written_arguments(_Handle(method, 2, [None]), [None] * 4)
    assert info.value.code == 0x23 and "takes 2 inputs and 1 outputs; the call passes 4" in str(info.value)


def test_a_delegate_writing_a_value_it_also_reads_is_refused():
    """One value passed as the input and as the output: the delegate would read what it overwrites."""
    runtime = _delegate_runtime(precise=True)
    error = _refused(_delegated([0, 0]), runtime=runtime)
    assert "instruction 0 (delegate Doubler): passes value 0 more than once and writes it" in str(error)
    _still_works(runtime)
