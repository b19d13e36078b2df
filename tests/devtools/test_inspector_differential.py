"""ExecuTorch's Inspector reads pterun's ETDump as it reads ExecuTorch's: the same program, exported with an
ETRecord, run with ETDump on both runtimes.

Timings differ between runtimes; everything else the Inspector shows must not: event blocks, event names
and their order, what each event logged (dtypes and shapes), and ``calculate_numeric_gap``'s rows (exported
operators and runtime events paired by debug handle). Gaps are held to the corpus's float32 tolerance
(``gap_bound``): ExecuTorch's own gaps are within it (asserted first), so two runtimes within it agree.
"""

from __future__ import annotations

import math

import pytest

from tests.devtools.programs import recorded
from tests.support import inspecting
from tests.support.inspecting import (
    FRAMEWORK_EVENTS, gap_bound, gap_rows, inspector, numeric_gap, reshaping_mse, rows, run_with_etdump, timed,
)

NOT_DELEGATED = ("mlp", "convnet", "gpt2", "llama", "dynamic", "mutable")
# transformers' models: the Inspector's pairing needs the reshaping comparator (see reshaping_mse).
RESHAPED = {"gpt2", "llama"}

_RUNS: dict[tuple[str, str], tuple] = {}


def _run(name: str, side: str, tmp_path_factory):
    """The Inspector over ``name`` run once on ``side`` ("executorch" or "pterun"), kept for the session."""
    key = (name, side)
    if key not in _RUNS:
        program = recorded(name)
        runtime = inspecting.executorch_runtime() if side == "executorch" else inspecting.pterun_runtime()
        out = tmp_path_factory.mktemp(f"{name}-{side}")
        etdump, debug, _ = run_with_etdump(runtime, program, program.flat_inputs, out)
        _RUNS[key] = (inspector(etdump, program.etrecord, debug), program)
    return _RUNS[key]


def _diff(expected: list, found: list) -> str:
    for i, (e, f) in enumerate(zip(expected, found)):
        if e != f:
            return f"event {i}: ExecuTorch's {e}, pterun's {f}"
    return f"ExecuTorch has {len(expected)} events, pterun {len(found)}; first extra: " + str(
        (expected[len(found):] or found[len(expected):])[0])


@pytest.mark.parametrize("name", NOT_DELEGATED)
def test_event_tables_agree(name, tmp_path_factory):
    reference, _ = _run(name, "executorch", tmp_path_factory)
    expected = rows(reference)
    assert {r.block for r in expected} == {"Default", "Execute"}, "premise: load and execute blocks"
    assert sum(1 for r in expected if r.debug) >= 4, "premise: ExecuTorch logged intermediate outputs"
    inspected, _ = _run(name, "pterun", tmp_path_factory)
    found = rows(inspected)
    assert found == expected, _diff(expected, found)
    assert timed(inspected) == [], "events without a timing"
    frame = inspected.to_dataframe()
    assert list(frame.columns) == list(reference.to_dataframe().columns)
    assert set(frame["event_name"]) - FRAMEWORK_EVENTS, "the table lists the operators"


@pytest.mark.parametrize("name", NOT_DELEGATED)
def test_numeric_gaps_agree(name, tmp_path_factory):
    comparator = (lambda: reshaping_mse()) if name in RESHAPED else (lambda: None)
    reference, _ = _run(name, "executorch", tmp_path_factory)
    expected = numeric_gap(reference, comparator())
    assert len(expected) >= 3, "premise: ExecuTorch's gap table has rows"
    compared = 0
    for row in expected.itertuples():
        if not math.isnan(row.gap[0]):
            compared += 1
            assert row.gap[0] <= gap_bound(row.aot_intermediate_output), (
                f"premise: ExecuTorch's gap at {row.aot_ops} is {row.gap[0]:.3g}")
    assert compared >= 3, "premise: gaps to compare"
    inspected, _ = _run(name, "pterun", tmp_path_factory)
    found = numeric_gap(inspected, comparator())
    assert gap_rows(found) == gap_rows(expected)
    for row, ours in zip(expected.itertuples(), found.itertuples()):
        assert math.isnan(ours.gap[0]) == math.isnan(row.gap[0]), f"{row.aot_ops}: {ours.gap} vs {row.gap}"
        if not math.isnan(row.gap[0]):
            bound = gap_bound(row.aot_intermediate_output)
            assert ours.gap[0] <= bound, f"{row.aot_ops}: gap {ours.gap[0]:.3g} over {bound:.3g}"
