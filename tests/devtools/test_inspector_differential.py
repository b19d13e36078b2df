"""ExecuTorch's Inspector reads pterun's ETDump as it reads ExecuTorch's: the same program, exported with an
ETRecord, run with ETDump on both runtimes.

Timings differ between runtimes; everything else the Inspector shows must not: event blocks, event names
and their order, what each event logged (dtypes and shapes), and ``calculate_numeric_gap``'s rows (exported
operators and runtime events paired by debug handle). Gaps are held to the corpus's float32 tolerance
(``gap_bound``): ExecuTorch's own gaps are within it (asserted first), so two runtimes within it agree.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.devtools.programs import recorded, xnnpack_nodes
from tests.support import inspecting
from tests.support.compare import assert_matches
from tests.support.inspecting import (
    FRAMEWORK_EVENTS,
    gap_bound,
    gap_rows,
    inspector,
    numeric_gap,
    reshaping_mse,
    rows,
    run_with_etdump,
    timed,
)

NOT_DELEGATED = ("mlp", "convnet", "gpt2", "llama", "dynamic", "mutable")
# transformers' models: the Inspector's pairing needs the reshaping comparator (see reshaping_mse).
RESHAPED = {"gpt2", "llama"}

@dataclass
class Run:
    inspected: object  # the Inspector, with the program's ETRecord
    etdump: Path
    debug: Path


_RUNS: dict[tuple[str, str], Run] = {}


def _run(name: str, side: str, tmp_path_factory) -> Run:
    """``name`` run once on ``side`` ("executorch" or "pterun") and inspected, kept for the session."""
    key = (name, side)
    if key not in _RUNS:
        program = recorded(name)
        runtime = inspecting.executorch_runtime() if side == "executorch" else inspecting.pterun_runtime()
        out = tmp_path_factory.mktemp(f"{name}-{side}")
        etdump, debug, _ = run_with_etdump(runtime, program, program.flat_inputs, out)
        _RUNS[key] = Run(inspector(etdump, program.etrecord, debug), etdump, debug)
    return _RUNS[key]


def _diff(expected: list, found: list) -> str:
    for i, (e, f) in enumerate(zip(expected, found)):
        if e != f:
            return f"event {i}: ExecuTorch's {e}, pterun's {f}"
    return f"ExecuTorch has {len(expected)} events, pterun {len(found)}; first extra: " + str(
        (expected[len(found):] or found[len(expected):])[0])


@pytest.mark.parametrize("name", NOT_DELEGATED)
def test_event_tables_agree(name, tmp_path_factory):
    reference = _run(name, "executorch", tmp_path_factory).inspected
    expected = rows(reference)
    assert {r.block for r in expected} == {"Default", "Execute"}, "premise: load and execute blocks"
    assert sum(1 for r in expected if r.debug) >= 4, "premise: ExecuTorch logged intermediate outputs"
    inspected = _run(name, "pterun", tmp_path_factory).inspected
    found = rows(inspected)
    assert found == expected, _diff(expected, found)
    assert timed(inspected) == [], "events without a timing"
    frame = inspected.to_dataframe()
    assert list(frame.columns) == list(reference.to_dataframe().columns)
    printed = io.StringIO()
    inspected.print_data_tabular(file=printed)
    names = list(inspected._prepare_dataframe()["event_name"])  # the rows print_data_tabular prints
    assert names == list(reference._prepare_dataframe()["event_name"])
    assert set(names) - FRAMEWORK_EVENTS and all(n in printed.getvalue() for n in names), printed.getvalue()


@pytest.mark.parametrize("name", NOT_DELEGATED)
def test_etdump_events_agree(name, tmp_path_factory):
    """Below the Inspector: every event's fields but its times and offsets, and the logged outputs."""
    expected = _events(_run(name, "executorch", tmp_path_factory).etdump)
    assert any(kind == "D" for block in expected for kind, *_ in block[1]), "premise: debug events"
    found = _events(_run(name, "pterun", tmp_path_factory).etdump)
    assert [b[0] for b in found] == [b[0] for b in expected]
    for (block, theirs), (_, ours) in zip(expected, found):
        assert ours == theirs, f"{block}: " + _diff(theirs, ours)
    reference = _run(name, "executorch", tmp_path_factory).inspected
    inspected = _run(name, "pterun", tmp_path_factory).inspected
    for theirs, ours in zip(reference.event_blocks, inspected.event_blocks):
        assert_matches(list(ours.run_output), list(theirs.run_output), what=f"{theirs.name} outputs")


@pytest.mark.parametrize("name", NOT_DELEGATED)
def test_numeric_gaps_agree(name, tmp_path_factory):
    comparator = (lambda: reshaping_mse()) if name in RESHAPED else (lambda: None)
    reference = _run(name, "executorch", tmp_path_factory).inspected
    expected = numeric_gap(reference, comparator())
    assert len(expected) >= 3, "premise: ExecuTorch's gap table has rows"
    compared = 0
    for row in expected.itertuples():
        if not math.isnan(row.gap[0]):
            compared += 1
            assert row.gap[0] <= gap_bound(row.aot_intermediate_output), (
                f"premise: ExecuTorch's gap at {row.aot_ops} is {row.gap[0]:.3g}")
    assert compared >= 3, "premise: gaps to compare"
    inspected = _run(name, "pterun", tmp_path_factory).inspected
    found = numeric_gap(inspected, comparator())
    assert gap_rows(found) == gap_rows(expected)
    for row, ours in zip(expected.itertuples(), found.itertuples()):
        assert math.isnan(ours.gap[0]) == math.isnan(row.gap[0]), f"{row.aot_ops}: {ours.gap} vs {row.gap}"
        if not math.isnan(row.gap[0]):
            bound = gap_bound(row.aot_intermediate_output)
            assert ours.gap[0] <= bound, f"{row.aot_ops}: gap {ours.gap[0]:.3g} over {bound:.3g}"


def test_xnnpack_nodes_are_events_inside_the_delegate_call(tmp_path_factory):
    """ExecuTorch's XNNPACK reports its own operators by name; pterun reports each node of the blob by its
    debug handle, timed inside the DELEGATE_CALL that ran it. Every other event is ExecuTorch's."""
    handles, instruction = xnnpack_nodes(recorded("xnnpack").pte)
    reference = rows(_run("xnnpack", "executorch", tmp_path_factory).inspected)
    assert [r.name for r in reference if not r.delegated and r.block == "Execute"] == [
        "DELEGATE_CALL", "Method::execute"], "premise: the whole program is one delegate call"
    assert any(r.delegated and isinstance(r.identifier, str) for r in reference), "premise: XNNPACK's events"
    run = _run("xnnpack", "pterun", tmp_path_factory)
    found = rows(run.inspected)
    assert [r for r in found if not r.delegated] == [r for r in reference if not r.delegated]
    nodes = [r for r in found if r.delegated]
    assert [r.identifier for r in nodes] == handles, "one event per node, by its debug handle"
    assert {r.instruction for r in nodes} == {instruction}
    assert timed(run.inspected) == []
    call, inside = _delegate_events(run.etdump, instruction)
    assert len(inside) == len(handles)
    for event in inside:
        assert call.start_time <= event.start_time <= event.end_time <= call.end_time, (
            f"node {event.delegate_debug_id_int} at {event.start_time}..{event.end_time}, "
            f"outside the call's {call.start_time}..{call.end_time}")


def test_xnnpack_gap_table_has_a_row_per_node(tmp_path_factory):
    """With a delegate map that names each node's own handle (ExecuTorch 1.5.1's ETRecord leaves XNNPACK's
    empty), the gap table has a row per node where ExecuTorch has one for the whole delegate.

    The map's keys are strings, as an ETRecord read from a file has them, in ascending order: the Inspector
    looks a delegate's identifier up as given, then as a string, then takes the last key that is a substring
    of it, which for decimal handles in ascending order is the handle itself.
    """
    from executorch.devtools.etrecord import parse_etrecord

    program = recorded("xnnpack")
    handles, instruction = xnnpack_nodes(program.pte)
    reference = _run("xnnpack", "executorch", tmp_path_factory)
    expected = numeric_gap(reference.inspected)
    assert [tuple(r.aot_debug_handle) for r in expected.itertuples()] == [tuple(handles)], (
        "premise: ExecuTorch's XNNPACK logs no intermediate outputs: one row for the delegate")
    record = parse_etrecord(str(program.etrecord))
    delegate = record._delegate_map["forward"][str(instruction)]
    assert delegate == {"name": "XnnpackBackend", "delegate_map": {}}, "premise: the ETRecord ExecuTorch writes"
    delegate["delegate_map"] = {str(handle): [handle] for handle in sorted(handles)}
    run = _run("xnnpack", "pterun", tmp_path_factory)
    found = numeric_gap(inspector(run.etdump, record, run.debug))
    assert sorted(tuple(r.aot_debug_handle) for r in found.itertuples()) == [(h,) for h in sorted(handles)]
    for row in found.itertuples():
        assert row.gap[0] <= gap_bound(row.aot_intermediate_output), f"{row.aot_ops}: gap {row.gap[0]:.3g}"


def _events(etdump: Path) -> list[tuple[str, list[tuple]]]:
    """Each block of an ETDump: its name and its events, as (kind, fields...) without times or offsets."""
    from executorch.devtools.etdump.serialize import deserialize_from_etdump_flatcc

    blocks = []
    for run in deserialize_from_etdump_flatcc(etdump.read_bytes()).run_data:
        events = []
        for e in run.events:
            if (p := e.profile_event) is not None:
                events.append(("P", p.name, p.chain_index, p.instruction_id, p.delegate_debug_id_int,
                               p.delegate_debug_id_str))
            if (d := e.debug_event) is not None:
                v = d.debug_entry
                tensors = [v.tensor] if v.tensor is not None else list(v.tensor_list.tensors) if v.tensor_list else []
                events.append(("D", d.name, d.chain_index, d.instruction_id, d.delegate_debug_id_int,
                               d.delegate_debug_id_str, str(v.val),
                               tuple((t.scalar_type, tuple(t.sizes), tuple(t.strides)) for t in tensors),
                               v.int_value, v.float_value, v.bool_value, v.output))
        blocks.append((run.name, events))
    return blocks


def _delegate_events(etdump: Path, instruction: int):
    """The DELEGATE_CALL at ``instruction`` and the delegate's own profiling events, from the ETDump."""
    from executorch.devtools.etdump.serialize import deserialize_from_etdump_flatcc

    events = [e.profile_event for run in deserialize_from_etdump_flatcc(etdump.read_bytes()).run_data
              if run.name == "Execute" for e in run.events if e.profile_event is not None]
    calls = [e for e in events if e.name == "DELEGATE_CALL" and e.instruction_id == instruction]
    assert len(calls) == 1, f"{len(calls)} DELEGATE_CALL events at instruction {instruction}"
    inside = [e for e in events if e.instruction_id == instruction and (
        e.delegate_debug_id_int != -1 or e.delegate_debug_id_str)]
    return calls[0], inside
