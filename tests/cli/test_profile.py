"""`pterun profile`: its table and JSON count every operator, its shares add up, its trace opens in a browser."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from typer.testing import CliRunner

from pterun.cli import traced
from pterun.cli.etdump_spans import INSTRUCTION_EVENTS
from pterun.cli.main import app
from pterun.cli.options import example_program
from pterun.format import ProgramFile
from pterun.runtime import Runtime
from tests.cli import profiled_demo, programs

runner = CliRunner()
WIDE = {"COLUMNS": "200"}  # no name cut short in a table


def _occurrences(pte, method: str = "forward") -> Counter:
    """How many instructions of the method each row name stands for."""
    return Counter(name for name, _ in Runtime.get().load_program(pte).metadata(method).instructions())


def _profile_json(*args, **kwargs) -> dict:
    result = runner.invoke(app, ["profile", *args, "--json"], **kwargs)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


@pytest.mark.parametrize("which", ["bundled example", "exported"])
def test_every_operator_is_counted_once_per_occurrence_and_run(which):
    pte = example_program() if which == "bundled example" else programs.mlp().pte
    occurrences = _occurrences(pte)
    assert len(occurrences) > 3 and max(occurrences.values()) > 1  # the premise: operators that repeat
    report = _profile_json(str(pte), "--iterations", "3", "--warmup", "1")
    assert report["runs"] == 3
    counts = {r["name"]: r["count"] for r in report["rows"]}
    assert counts == {name: 3 * n for name, n in occurrences.items()}


def test_shares_add_up_to_what_the_footer_says():
    pte = programs.mlp().pte
    report = _profile_json(str(pte), "-n", "2", "--warmup", "0")
    shares = sum(r["share"] for r in report["rows"] if r["delegate"] is None)
    assert shares == pytest.approx(report["explained_share"])
    assert 0 < report["explained_share"] <= 1
    total = sum(r["total_ms"] for r in report["rows"])
    assert total == pytest.approx(report["explained_share"] * report["method_total_ms"])
    ordered = [r["total_ms"] for r in report["rows"]]
    assert ordered == sorted(ordered, reverse=True)

    result = runner.invoke(app, ["profile", str(pte), "-n", "2", "--warmup", "0"], env=WIDE)
    assert result.exit_code == 0, result.output
    for name in _occurrences(pte):
        assert name in result.output
    footer = next(line for line in result.output.splitlines() if "Method::execute" in line)
    assert "listed" in footer and "%" in footer


def test_top_lists_the_slowest_and_says_how_many_are_left():
    pte = programs.mlp().pte
    everything = _profile_json(str(pte), "-n", "1", "--warmup", "0")["rows"]
    assert len(everything) > 2
    top = _profile_json(str(pte), "-n", "1", "--warmup", "0", "--top", "2")
    assert len(top["rows"]) == 2
    assert top["explained_share"] == pytest.approx(sum(r["share"] for r in top["rows"]))
    result = runner.invoke(app, ["profile", str(pte), "-n", "1", "--warmup", "0", "--top", "2"], env=WIDE)
    assert f"{len(everything) - 2} more operator(s) not listed" in result.output


def test_the_trace_is_trace_event_json_with_one_event_per_instruction_and_run(tmp_path):
    pte = programs.mlp().pte
    plan = ProgramFile(pte).plan("forward")
    runs = 3
    result = runner.invoke(app, ["profile", str(pte), "-n", str(runs), "--warmup", "1", "--trace",
                                 str(tmp_path / "t.json")])
    assert result.exit_code == 0, result.output
    trace = json.loads((tmp_path / "t.json").read_text())
    events = trace["traceEvents"]
    names = {e["args"]["name"] for e in events if e["ph"] == "M"}
    assert names == {"program.pte", "forward"}
    complete = [e for e in events if e["ph"] == "X"]
    for e in complete:
        assert isinstance(e["ts"], (int, float)) and isinstance(e["dur"], (int, float)) and e["dur"] >= 0
        assert {"pid", "tid", "name", "cat"} <= set(e)
    methods = [e for e in complete if e["cat"] == "method"]
    instructions = [e for e in complete if e["cat"] in INSTRUCTION_EVENTS]
    assert len(methods) == runs
    assert len(instructions) == runs * len(plan.instructions)
    assert Counter((e["args"]["run"], e["args"]["instruction"]) for e in instructions) == Counter(
        {(run, i): 1 for run in range(runs) for i in range(len(plan.instructions))})
    for e in instructions:
        parent = methods[e["args"]["run"]]
        assert parent["ts"] <= e["ts"] and e["ts"] + e["dur"] <= parent["ts"] + parent["dur"] + 1e-3
    assert trace["otherData"]["program"] == "program.pte" and trace["otherData"]["runs"] == runs


def test_a_delegates_nodes_are_rows_under_it_and_spans_inside_its_call(monkeypatch, tmp_path):
    recorded = programs.demo_delegated()
    plan = ProgramFile(recorded.pte).plan("forward")
    assert [d.backend_id for d in plan.delegates] == ["BackendWithCompilerDemo"]  # the premise
    monkeypatch.setattr(traced, "runtime", profiled_demo.runtime)
    report = _profile_json(str(recorded.pte), "-n", "4", "--warmup", "1", "--trace", str(tmp_path / "t.json"))
    rows = {r["name"]: r for r in report["rows"]}
    assert rows["BackendWithCompilerDemo"]["kind"] == "delegate" and rows["BackendWithCompilerDemo"]["count"] == 4
    node = rows["demo aten.add.Tensor"]  # summed by type: the node's number left out
    assert node["kind"] == "node" and node["delegate"] == "BackendWithCompilerDemo" and node["count"] == 4
    names = [r["name"] for r in report["rows"]]
    assert names.index("demo aten.add.Tensor") == names.index("BackendWithCompilerDemo") + 1
    assert node["total_ms"] <= rows["BackendWithCompilerDemo"]["total_ms"]

    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    calls = [e for e in events if e.get("cat") == "DELEGATE_CALL"]
    nodes = [e for e in events if e.get("cat") == "delegate node"]
    assert len(calls) == len(nodes) == 4
    for call, node in zip(calls, nodes):
        assert node["name"] == "demo aten.add.Tensor #1" and node["args"]["debug_handle"] == 1
        assert call["ts"] <= node["ts"] and node["ts"] + node["dur"] <= call["ts"] + call["dur"] + 1e-3

    result = runner.invoke(app, ["profile", str(recorded.pte), "-n", "1", "--warmup", "0"], env=WIDE)
    # Rich may wrap the name at the terminal's width (COLUMNS is read once, when the console is made).
    assert "BackendWithCompilerDemo" in result.output and "(delegate)" in result.output
    assert "└ demo aten.add.Tensor" in result.output


def test_etdump_keeps_the_profiled_runs_for_the_inspector(tmp_path):
    from pterun.format.etdump import read_etdump

    pte = programs.mlp().pte
    result = runner.invoke(app, ["profile", str(pte), "-n", "2", "--warmup", "3", "--etdump", str(tmp_path / "p.etdp")])
    assert result.exit_code == 0, result.output
    blocks = read_etdump((tmp_path / "p.etdp").read_bytes())
    assert [b.name for b in blocks] == ["Execute", "Execute"]  # the load and the warm-up runs left out


def test_xnnpack_nodes_are_rows_under_their_delegate_and_spans_inside_its_calls(tmp_path):
    recorded = programs.recorded_xnnpack_cnn()
    plan = ProgramFile(recorded.pte).plan("forward")
    assert [d.backend_id for d in plan.delegates] == ["XnnpackBackend"] * 2  # the premise
    runs = 3
    report = _profile_json(str(recorded.pte), "-n", str(runs), "--warmup", "0", "--trace", str(tmp_path / "t.json"))
    rows = report["rows"]
    names = [r["name"] for r in rows]
    delegate = names.index("XnnpackBackend")
    assert rows[delegate]["count"] == runs * 2
    nodes = [r for r in rows if r["kind"] == "node"]
    assert nodes == rows[delegate + 1: delegate + 1 + len(nodes)]  # right under their delegate
    assert all(r["delegate"] == "XnnpackBackend" for r in nodes)
    counts = {r["name"]: r["count"] for r in nodes}
    assert counts["XNNConv2d"] == runs * 2 and counts["XNNFullyConnected"] == runs

    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    calls = {(e["args"]["run"], e["args"]["instruction"]): e for e in events if e.get("cat") == "DELEGATE_CALL"}
    spans = [e for e in events if e.get("cat") == "delegate node"]
    assert len(spans) == sum(counts.values())
    for node in spans:
        call = calls[(node["args"]["run"], node["args"]["instruction"])]
        assert call["ts"] <= node["ts"] and node["ts"] + node["dur"] <= call["ts"] + call["dur"] + 1e-3
