"""`pterun compare`: outputs beside ExecuTorch's runtime's, and with an ETRecord every operator beside the graph's."""

from __future__ import annotations

import dataclasses
import json
import sys

import pytest
import torch
from typer.testing import CliRunner

import pterun
from pterun.cli import traced
from pterun.cli.main import app
from tests.cli import profiled_demo, programs

runner = CliRunner()
WIDE = {"COLUMNS": "200"}


def _compare_json(*args) -> dict:
    result = runner.invoke(app, ["compare", *args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _graph_operators(etrecord) -> list[str]:
    """The exported graph's operators, in order: what the Inspector compares."""
    from executorch.devtools.etrecord import parse_etrecord

    graph = parse_etrecord(str(etrecord)).exported_program.graph
    return [n.name for n in graph.nodes if n.op == "call_function"]


def test_outputs_match_executorchs_runtime_on_random_inputs_with_the_seed_said():
    pte = programs.mlp().pte
    report = _compare_json(str(pte), "--seed", "7")
    assert report["against"] == "executorch" and report["inputs"] == "random, seed 7"
    assert len(report["outputs"]) == 2  # the premise: the program has two outputs
    for out in report["outputs"]:
        assert not out["over"] and out["relative"] < 1e-5 and out["shape"]
    assert report["first_output_over"] is None and "operators" not in report

    result = runner.invoke(app, ["compare", str(pte)], env=WIDE)
    assert result.exit_code == 0, result.output
    assert "random, seed 0" in result.output and "against executorch" in result.output
    assert result.output.count(" ok ") >= 2 and "over" not in result.output


def test_inputs_from_a_file_are_the_ones_run(tmp_path):
    pte = programs.mlp().pte
    torch.save([torch.zeros(2, 8), torch.ones(2, 4)], tmp_path / "in.pt")
    report = _compare_json(str(pte), "--inputs", str(tmp_path / "in.pt"))
    assert report["inputs"] == str(tmp_path / "in.pt") and report["first_output_over"] is None


def test_with_an_etrecord_every_operator_has_a_row_in_graph_order():
    recorded = programs.recorded_mlp()
    names = _graph_operators(recorded.etrecord)
    assert names == ["linear", "relu", "linear_1", "relu_1", "linear_2", "add", "sum_1"]  # the premise
    report = _compare_json(str(recorded.pte), "--etrecord", str(recorded.etrecord))
    assert report["against"] == "etrecord" and report["inputs"] == "the ETRecord's representative inputs"
    assert [row["operator"] for row in report["operators"]] == [[n] for n in names]
    handles = [row["debug_handles"] for row in report["operators"]]
    assert handles == sorted(handles) and all(len(h) == 1 for h in handles)
    assert report["first_operator_over"] is None and report["first_output_over"] is None
    assert all(row["relative"] < 1e-5 for row in report["operators"] + report["outputs"])

    result = runner.invoke(app, ["compare", str(recorded.pte), "--etrecord", str(recorded.etrecord)], env=WIDE)
    assert result.exit_code == 0, result.output
    assert "every operator is within relative error 0.001" in result.output
    for name in names:
        assert name in result.output


def _relu_off_by(amount: float):
    """A runtime whose relu adds ``amount`` to what it computes."""
    rt = pterun.Runtime()
    kernels = rt.registries.kernels
    base = kernels.lookup("aten::relu.out")

    def factory(nargs):
        binding = base(nargs)

        def relu(x, out):
            binding.fn(x, out=out)
            out.add_(amount)

        return dataclasses.replace(binding, fn=relu, functional=None)

    kernels.register("aten::relu.out", factory)
    return rt


def test_the_first_operator_over_the_threshold_is_the_first_that_drifts(monkeypatch):
    recorded = programs.recorded_mlp()
    monkeypatch.setattr(traced, "runtime", lambda: _relu_off_by(0.25))
    report = _compare_json(str(recorded.pte), "--etrecord", str(recorded.etrecord))
    rows = report["operators"]
    assert [row["over"] for row in rows[:2]] == [False, True]  # linear is exact; relu drifts, and what follows
    assert report["first_operator_over"] == 1 and rows[1]["operator"] == ["relu"]
    assert rows[1]["max_abs"] == pytest.approx(0.25)
    assert report["first_output_over"] is not None

    result = runner.invoke(app, ["compare", str(recorded.pte), "--etrecord", str(recorded.etrecord)], env=WIDE)
    marked = [line for line in result.output.splitlines() if "◀ first" in line]
    assert len(marked) == 2 and " relu " in marked[1]  # one among the outputs, one among the operators


def test_a_tiny_threshold_puts_the_first_inexact_row_over(monkeypatch):
    pte = programs.mlp().pte
    # pterun and ExecuTorch may agree bit for bit here: a relu a millionth off makes the outputs after it inexact.
    monkeypatch.setattr(traced, "runtime", lambda: _relu_off_by(1e-6))
    loose = _compare_json(str(pte))
    inexact = [i for i, out in enumerate(loose["outputs"]) if out["max_abs"] > 0]
    exact = [i for i, out in enumerate(loose["outputs"]) if out["max_abs"] == 0]
    assert inexact and not any(out["over"] for out in loose["outputs"]), loose["outputs"]
    tight = _compare_json(str(pte), "--threshold", "0")
    assert tight["first_output_over"] == inexact[0]
    assert all(not tight["outputs"][i]["over"] for i in exact)


@pytest.mark.parametrize("delegate_map", ["mapped", "unmapped"])
def test_nodes_inside_a_delegate_have_rows_under_it(delegate_map, monkeypatch, tmp_path):
    """ExecuTorch's demo backend maps its node identifiers to debug handles in the ETRecord; XNNPACK maps
    none, and its nodes are paired by the debug handle they report (as the "unmapped" ETRecord here)."""
    from executorch.devtools.etrecord import parse_etrecord

    recorded = programs.demo_delegated()
    etrecord = recorded.etrecord
    record = parse_etrecord(str(etrecord))
    assert record._delegate_map["forward"]["0"]["delegate_map"] == {"1": [1]}  # the premise
    if delegate_map == "unmapped":
        record._delegate_map = {"forward": {"0": {"name": "BackendWithCompilerDemo", "delegate_map": {}}}}
        etrecord = tmp_path / "unmapped.bin"
        record.save(str(etrecord))
    monkeypatch.setattr(traced, "runtime", profiled_demo.runtime)
    report = _compare_json(str(recorded.pte), "--etrecord", str(etrecord))
    rows = report["operators"]
    assert [(r["operator"], r["debug_handles"]) for r in rows] == [(["add"], [1]), (["mul"], [2])]
    assert rows[0]["delegate"] == "BackendWithCompilerDemo" and rows[0]["runtime"] == "demo aten.add.Tensor #1"
    assert rows[1]["delegate"] is None
    assert report["first_operator_over"] is None


# -- a user's mistakes: one line, naming the culprit --------------------------------------------


def _one_error_line(result, *fragments) -> None:
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def _error_cases(tmp_path) -> dict:
    pte = str(programs.mlp().pte)
    etrecord = str(programs.recorded_mlp().etrecord)
    bad = tmp_path / "bad.pte"
    bad.write_bytes(b"\0" * 64)
    (tmp_path / "bad.bin").write_bytes(b"not a zip")
    return {
        "missing program": (["profile", "missing.pte"], "'missing.pte'", "does not exist"),
        "missing program to compare": (["compare", "missing.pte"], "'missing.pte'", "does not exist"),
        "corrupt program": (["profile", str(bad)], "InvalidProgram"),
        "corrupt program to compare": (["compare", str(bad)], "InvalidProgram"),
        "bad method": (["profile", pte, "--method", "nope"], "'nope'", "InvalidArgument"),
        "bad method to compare": (["compare", pte, "--method", "nope"], "'nope'"),
        "missing etrecord": (["compare", pte, "--etrecord", "missing.bin"], "--etrecord 'missing.bin'", "no such file"),
        "corrupt etrecord": (["compare", pte, "--etrecord", str(tmp_path / "bad.bin")], "is not an ETRecord"),
        "etrecord of another method": (["compare", pte, "--etrecord", etrecord, "-m", "other"], "'forward' only"),
        "etrecord reference without one": (["compare", pte, "--against", "etrecord"], "needs --etrecord"),
        "unknown reference": (["compare", pte, "--against", "eager"], "--against", "'eager'"),
        "unwritable trace": (["profile", pte, "-n", "1", "--trace", str(tmp_path / "no" / "t.json")], "--trace"),
    }


ERROR_CASES = ["missing program", "missing program to compare", "corrupt program", "corrupt program to compare",
               "bad method", "bad method to compare", "missing etrecord", "corrupt etrecord",
               "etrecord of another method", "etrecord reference without one", "unknown reference", "unwritable trace"]


@pytest.mark.parametrize("case", ERROR_CASES)
def test_a_mistake_is_one_error_line(case, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cases = _error_cases(tmp_path)
    assert sorted(cases) == sorted(ERROR_CASES)
    args, *fragments = cases[case]
    _one_error_line(runner.invoke(app, args), *fragments)


@pytest.mark.parametrize("module, args, fragment", [
    ("executorch.extension.pybindings", [], "--against executorch needs ExecuTorch installed"),
    ("executorch.devtools.etrecord", ["--etrecord", "ETRECORD"], "--etrecord needs ExecuTorch's devtools"),
])
def test_without_executorch_the_reference_says_what_to_install(module, args, fragment, monkeypatch):
    recorded = programs.recorded_mlp()
    args = [str(recorded.etrecord) if a == "ETRECORD" else a for a in args]
    monkeypatch.setitem(sys.modules, module, None)  # what an import finds when the package is not there
    _one_error_line(runner.invoke(app, ["compare", str(recorded.pte), *args]), fragment)


def test_a_debug_buffer_too_small_is_grown_until_every_value_fits(monkeypatch):
    recorded = programs.recorded_mlp()
    loads = []

    def counting_runtime():
        loads.append(1)
        return pterun.Runtime.get()

    monkeypatch.setattr(traced, "runtime", counting_runtime)
    monkeypatch.setattr(traced, "debug_buffer_estimate", lambda plan: 64)
    report = _compare_json(str(recorded.pte), "--etrecord", str(recorded.etrecord))
    assert len(loads) > 1  # the premise: the first buffer was too small
    assert len(report["operators"]) == 7 and report["first_operator_over"] is None

    monkeypatch.setattr(traced, "debug_buffer_estimate", lambda plan: 1)
    result = runner.invoke(app, ["compare", str(recorded.pte), "--etrecord", str(recorded.etrecord)])
    _one_error_line(result, "do not fit in a debug buffer")


def test_inside_xnnpack_delegates_every_node_has_a_row_within_tolerance():
    recorded = programs.recorded_xnnpack_cnn()
    plan = pterun.format.ProgramFile(recorded.pte).plan("forward")
    # The premise: the convolutions and the linear layer in two delegates, the mean between them a kernel.
    assert [d.backend_id for d in plan.delegates] == ["XnnpackBackend"] * 2 and len(plan.instructions) == 3
    report = _compare_json(str(recorded.pte), "--etrecord", str(recorded.etrecord))
    rows = report["operators"]
    # Each convolution's node stands for its ReLU too, which the exporter fused into it.
    assert [r["operator"] for r in rows] == [["conv2d", "relu"], ["conv2d_1", "relu_1"], ["mean"], ["linear"]]
    assert [r["delegate"] for r in rows] == ["XnnpackBackend", "XnnpackBackend", None, "XnnpackBackend"]
    assert [r["runtime"] for r in rows] == ["XNNConv2d #1", "XNNConv2d #2", "native_call_mean.out",
                                            "XNNFullyConnected #1"]
    assert report["first_operator_over"] is None, rows
    assert all(r["relative"] < 1e-5 for r in rows)


def test_a_quantized_node_is_compared_with_the_quantize_dequantize_after_it():
    recorded = programs.recorded_xnnpack_cnn_q8()
    report = _compare_json(str(recorded.pte), "--etrecord", str(recorded.etrecord), "--threshold", "0.02")
    rows = {r["runtime"]: r for r in report["operators"]}
    assert "XNNConvert #1" in rows and "XNNConv2d #1" in rows  # the premise: the input quantized in the delegate
    # The input's quantize, logged as its integers, against the graph's integers: exact.
    convert = rows["XNNConvert #1"]
    assert len(convert["operator"]) == 1 and convert["operator"][0].startswith("quantize_per_tensor")
    assert convert["max_abs"] == 0
    # A convolution's 8-bit output, logged dequantized, against its ReLU, quantize and dequantize.
    conv = rows["XNNConv2d #1"]
    assert conv["operator"][:2] == ["conv2d", "relu"] and len(conv["operator"]) == 4
    assert conv["operator"][2].startswith("quantize") and conv["operator"][3].startswith("dequantize")
    assert conv["relative"] < 0.02 and conv["snr_db"] > 30  # a rounding step at most, not another value
    assert report["first_operator_over"] is None
