"""State a program's methods share (``MemoryPlanningPass(share_mutable_buffers=True)``): one buffer for a
``Runtime`` program's methods, as ExecuTorch's ``executorch.runtime`` gives them, and one per method in a
pybindings module, as ExecuTorch's modules give them; each against ExecuTorch itself."""

from __future__ import annotations

import threading

import pytest
import torch

import pterun
from pterun import pybindings
from pterun.format import ProgramFile, TensorSpec
from tests.support.exporting import ExportSpec, export_program


class _State(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("state", torch.zeros(4, 8))

    def write(self, x):
        self.state.copy_(x)
        return x * 2

    def read(self, y):
        return self.state + y


class _Call(torch.nn.Module):
    def __init__(self, shared: _State, name: str) -> None:
        super().__init__()
        self.shared, self.name = shared, name

    def forward(self, x):
        return getattr(self.shared, self.name)(x)


def _export(share: bool):
    def make() -> ExportSpec:
        from executorch.exir.passes import MemoryPlanningPass

        shared = _State()
        return ExportSpec({"write": _Call(shared, "write"), "read": _Call(shared, "read")},
                          {"write": (torch.randn(4, 8),), "read": (torch.randn(4, 8),)}, strict=True,
                          config={"memory_planning_pass": MemoryPlanningPass(share_mutable_buffers=share),
                                  "emit_mutable_buffer_names": True})

    return export_program(f"shared-state-{share}", make)


def _state_places(pte) -> dict[str, tuple[int, int]]:
    """Where each method's plan puts the state: (memory id, offset)."""
    file = ProgramFile(pte)
    places = {}
    for name in ("write", "read"):
        (spec,) = [v for v in file.plan(name).values if isinstance(v, TensorSpec) and v.fqn]
        places[name] = (spec.memory_id, spec.memory_offset)
    return places


X = torch.arange(32.0).reshape(4, 8)


def _written_then_read(program_or_module, pybinding: bool) -> torch.Tensor:
    if pybinding:
        program_or_module.run_method("write", [X])
        return program_or_module.run_method("read", [torch.zeros(4, 8)])[0]
    write, read = program_or_module.load_method("write"), program_or_module.load_method("read")
    write.execute([X])
    return read.execute([torch.zeros(4, 8)])[0]


def test_a_runtime_programs_methods_share_the_state_as_executorchs_do():
    from executorch.runtime import Runtime as ExecuTorchRuntime

    exported = _export(True)
    places = _state_places(exported.pte)
    assert places["write"] == places["read"] and places["write"][0] == 2, places  # the premise: planned for sharing
    expected = _written_then_read(ExecuTorchRuntime.get().load_program(str(exported.pte)), False)
    assert torch.equal(expected, X)  # ExecuTorch's runtime shares it
    assert torch.equal(_written_then_read(pterun.Runtime.get().load_program(exported.pte), False), expected)


def test_a_pybindings_modules_methods_keep_their_own_as_executorchs_do():
    from executorch.extension.pybindings import portable_lib

    exported = _export(True)
    expected = _written_then_read(portable_lib._load_for_executorch(str(exported.pte)), True)
    assert torch.equal(expected, torch.zeros(4, 8))  # the state as loaded (the file keeps no initial value)
    assert torch.equal(_written_then_read(pybindings._load_for_executorch(str(exported.pte)), True), expected)


@pytest.mark.parametrize("how", ["share_state=False", "cached=False", "planned apart"])
def test_methods_keep_their_own_state_otherwise(how):
    exported = _export(how != "planned apart")
    program = pterun.Runtime.get().load_program(exported.pte, share_state=how != "share_state=False")
    if how == "planned apart":  # the premise: the default plan, everything on memory id 1
        assert all(len(ProgramFile(exported.pte).plan(m).buffer_sizes) == 2 for m in ("write", "read"))
    write = program.load_method("write", cached=how != "cached=False")
    read = program.load_method("read", cached=how != "cached=False")
    write.execute([X])
    assert torch.equal(read.execute([torch.zeros(4, 8)])[0], torch.zeros(4, 8))


def test_methods_sharing_state_take_turns():
    exported = _export(True)
    program = pterun.Runtime.get().load_program(exported.pte)
    write, read = program.load_method("write"), program.load_method("read")
    assert write._calls.lock is read._calls.lock  # one lock for both
    seen, errors = [], []

    def writer():
        for i in range(200):
            write.execute([torch.full((4, 8), float(i))])

    def reader():
        try:
            for _ in range(200):
                value = read.execute([torch.zeros(4, 8)])[0]
                seen.append(value)
                assert bool((value == value.flatten()[0]).all()), "a read saw half a write"
        except AssertionError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(seen) == 200
