"""The ETDump switches of pterun.pybindings and Runtime, each against what ExecuTorch 1.5.1 does with them.

Measured of ExecuTorch's (its pybindings and executorch.runtime share one ETDump writer):
- ``write_etdump_result_to_file`` drains: a second write holds only the runs since the first (no load
  events again). A write with nothing recorded yet writes no file and raises nothing.
- Without ``enable_etdump``, ``has_etdump()`` is False and the write raises RuntimeError "No etdump found".
- Three traps, where pterun does the safe thing instead: a debug buffer too small for a run's tensors
  aborts the process; a run after a write, with a debug buffer, aborts the process (the write detaches the
  buffer); two writes with no run between them crash it. pterun raises MemoryAllocationFailed (0x21) from
  the call that ran out, after the run, keeping the events that fit; it keeps logging after a write.
"""

from __future__ import annotations

import pytest
import torch

from pterun import pybindings
from pterun.errors import ErrorCode, MemoryAllocationFailed, PteError
from tests.devtools.programs import recorded
from tests.support import inspecting
from tests.support.compare import assert_matches
from tests.support.inspecting import inspector, rows, run_with_etdump
from tests.support.oracle import run_reference


def _blocks(etdump) -> list[tuple[str, int, int]]:
    """Each run-data block of an ETDump file: its name, profiling events and debug events."""
    from executorch.devtools.etdump.serialize import deserialize_from_etdump_flatcc

    data = deserialize_from_etdump_flatcc(etdump.read_bytes())
    return [(run.name, sum(e.profile_event is not None for e in run.events),
             sum(e.debug_event is not None for e in run.events)) for run in data.run_data]


def _executorch_pybindings():
    from executorch.extension.pybindings import portable_lib

    inspecting.executorch_runtime()  # registers the kernel libraries
    return portable_lib


def _loaders(bindings, program, size):
    path, buffer = str(program.pte), program.pte.read_bytes()  # ExecuTorch's module keeps using the buffer
    return {
        "_load_for_executorch": lambda: bindings._load_for_executorch(path, enable_etdump=True,
                                                                      debug_buffer_size=size),
        "_load_for_executorch_from_buffer": lambda: bindings._load_for_executorch_from_buffer(
            buffer, enable_etdump=True, debug_buffer_size=size),
        "_load_program": lambda: bindings._load_program(path, enable_etdump=True, debug_buffer_size=size),
    }


def _write_after_forward(load, inputs, out):
    out.mkdir()
    loaded = load()  # ``load`` holds the buffer ExecuTorch's module reads from: it lives as long as this call
    assert loaded.has_etdump()
    if hasattr(loaded, "forward"):
        loaded.forward(inputs)
    else:
        loaded.load_method("forward")(inputs)
    etdump, debug = out / "run.etdp", out / "run.debug"
    loaded.write_etdump_result_to_file(str(etdump), str(debug))
    return etdump, debug


@pytest.mark.parametrize("loader", ["_load_for_executorch", "_load_for_executorch_from_buffer", "_load_program"])
def test_pybindings_write_what_the_inspector_reads(loader, tmp_path):
    program = recorded("mlp")
    inputs = program.flat_inputs
    expected = _write_after_forward(_loaders(_executorch_pybindings(), program, 1 << 20)[loader], inputs,
                                    tmp_path / "executorch")
    reference = rows(inspector(expected[0], program.etrecord, expected[1]))
    assert any(r.debug for r in reference), "premise: ExecuTorch logged intermediate outputs"
    found = _write_after_forward(_loaders(pybindings, program, 1 << 20)[loader], inputs, tmp_path / "pterun")
    assert rows(inspector(found[0], program.etrecord, found[1])) == reference


def test_write_drains_the_events(tmp_path):
    """No debug buffer: with one, ExecuTorch aborts on the run after a write."""
    program = recorded("mlp")
    inputs = program.flat_inputs
    blocks = {}
    for side, runtime in (("executorch", inspecting.executorch_runtime()), ("pterun", inspecting.pterun_runtime())):
        loaded = runtime.get().load_program(str(program.pte), enable_etdump=True)
        method = loaded.load_method("forward")
        files = []
        for i in range(2):
            method.execute(inputs)
            files.append(tmp_path / f"{side}{i}.etdp")
            loaded.write_etdump_result_to_file(str(files[-1]), str(tmp_path / f"{side}{i}.debug"))
        blocks[side] = [_blocks(f) for f in files]
        assert not any((tmp_path / f"{side}{i}.debug").exists() for i in range(2)), f"{side}: no debug buffer"
    first, second = blocks["executorch"]
    assert [b[0] for b in first] == ["Default", "Execute"] and [b[0] for b in second] == ["Execute"], (
        "premise: ExecuTorch's second write holds the second run only")
    assert all(debug == 0 for f in (first, second) for _, _, debug in f), "premise: no debug events"
    assert blocks["pterun"] == blocks["executorch"]


def test_nothing_recorded_writes_no_file(tmp_path):
    """A module loads its program on first use, so before a call there is nothing to write."""
    for side, bindings in (("executorch", _executorch_pybindings()), ("pterun", pybindings)):
        module = bindings._load_for_executorch(str(recorded("mlp").pte), enable_etdump=True)
        module.write_etdump_result_to_file(str(tmp_path / f"{side}.etdp"), str(tmp_path / f"{side}.debug"))
        assert not (tmp_path / f"{side}.etdp").exists(), side


def test_a_write_with_nothing_new_writes_nothing(tmp_path):
    """ExecuTorch's runtime crashes on a second write with no run between (its builder is ended twice)."""
    program = recorded("mlp")
    loaded = inspecting.pterun_runtime().get().load_program(str(program.pte), enable_etdump=True,
                                                            debug_buffer_size=1 << 20)
    loaded.load_method("forward").execute(program.flat_inputs)
    loaded.write_etdump_result_to_file(str(tmp_path / "1.etdp"), str(tmp_path / "1.debug"))
    assert [b[0] for b in _blocks(tmp_path / "1.etdp")] == ["Default", "Execute"], "premise: the first write"
    loaded.write_etdump_result_to_file(str(tmp_path / "2.etdp"), str(tmp_path / "2.debug"))
    assert not (tmp_path / "2.etdp").exists() and not (tmp_path / "2.debug").exists()


def test_write_without_etdump_raises(tmp_path):
    program = recorded("mlp")
    reference = _executorch_pybindings()._load_for_executorch(str(program.pte))
    assert not reference.has_etdump()
    with pytest.raises(RuntimeError, match="No etdump found"):
        reference.write_etdump_result_to_file(str(tmp_path / "executorch.etdp"))
    module = pybindings._load_for_executorch(str(program.pte))
    assert not module.has_etdump()
    loaded = inspecting.pterun_runtime().get().load_program(str(program.pte))
    loaded.load_method("forward").execute(program.flat_inputs)
    for write in (module.write_etdump_result_to_file, loaded.write_etdump_result_to_file):
        with pytest.raises(PteError) as raised:
            write(str(tmp_path / "pterun.etdp"), str(tmp_path / "pterun.debug"))
        assert isinstance(raised.value, RuntimeError) and raised.value.code == ErrorCode.InvalidState, raised.value
        assert not (tmp_path / "pterun.etdp").exists()


SMALL = 4096  # the MLP's first few intermediate outputs, not all of them


def test_debug_buffer_too_small(tmp_path):
    """ExecuTorch aborts the process; pterun fails each call that runs out, after its run, keeping the
    events that fit, and the method keeps working."""
    program = recorded("mlp")
    inputs = program.flat_inputs
    full, _, _ = run_with_etdump(inspecting.executorch_runtime(), program, inputs, tmp_path / "full")
    (_, full_profile, full_debug), = [b for b in _blocks(full) if b[0] == "Execute"]
    assert full_debug >= 5, "premise: a full buffer holds every intermediate output"
    loaded = inspecting.pterun_runtime().get().load_program(str(program.pte), enable_etdump=True,
                                                            debug_buffer_size=SMALL)
    method = loaded.load_method("forward")
    for _ in range(2):
        with pytest.raises(MemoryAllocationFailed) as raised:
            method.execute(inputs)
        assert raised.value.code == ErrorCode.MemoryAllocationFailed == 0x21
    etdump, debug = tmp_path / "small.etdp", tmp_path / "small.debug"
    loaded.write_etdump_result_to_file(str(etdump), str(debug))
    assert debug.stat().st_size == SMALL
    executes = [b for b in _blocks(etdump) if b[0] == "Execute"]
    assert [profile for _, profile, _ in executes] == [full_profile] * 2, "every profiling event kept"
    assert 0 < executes[0][2] < full_debug, "the debug events that fit"
    inspected = inspector(etdump, program.etrecord, debug)  # opens: every kept event lies inside the buffer
    assert any(r.debug for r in rows(inspected))
    roomy = inspecting.pterun_runtime().get().load_program(str(program.pte), enable_etdump=True,
                                                           debug_buffer_size=1 << 20)
    assert_matches(roomy.load_method("forward").execute(inputs), run_reference(program.pte, inputs))


def test_outputs_of_a_call_that_ran_out_of_debug_buffer(tmp_path):
    program = recorded("mlp")
    inputs = program.flat_inputs
    loaded = inspecting.pterun_runtime().get().load_program(str(program.pte), enable_etdump=True,
                                                            debug_buffer_size=SMALL)
    method = loaded.load_method("forward")
    with pytest.raises(MemoryAllocationFailed, match="outputs were computed"):
        method.execute(inputs)
    assert_matches(method.get_outputs(), run_reference(program.pte, inputs))


def test_runs_after_a_write_keep_logging(tmp_path):
    """ExecuTorch aborts here (a write detaches its debug buffer); pterun logs the next run into it."""
    program = recorded("mlp")
    first, second = program.flat_inputs, [x * 2 for x in program.flat_inputs]
    loaded = inspecting.pterun_runtime().get().load_program(str(program.pte), enable_etdump=True,
                                                            debug_buffer_size=1 << 20)
    method = loaded.load_method("forward")
    method.execute(first)
    loaded.write_etdump_result_to_file(str(tmp_path / "1.etdp"), str(tmp_path / "1.debug"))
    outputs = method.execute(second)
    loaded.write_etdump_result_to_file(str(tmp_path / "2.etdp"), str(tmp_path / "2.debug"))
    inspected = inspector(tmp_path / "2.etdp", program.etrecord, tmp_path / "2.debug")
    (block,) = [b for b in inspected.event_blocks if b.name == "Execute"]
    assert_matches(list(block.run_output), [torch.as_tensor(o) for o in outputs], what="logged outputs")
