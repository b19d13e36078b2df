"""`pterun test`: every test case of a bundled program, pass or fail, as a table or JSON."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

pytest.importorskip("executorch.devtools.bundled_program.core")

from pterun.cli.main import app  # noqa: E402
from pterun.format.bundled import BundledFile  # noqa: E402
from tests.support import bundling  # noqa: E402

runner = CliRunner()


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    directory = tmp_path_factory.mktemp("bundles")
    exported, model = bundling.two_methods()
    inputs = bundling.two_methods_inputs(3, seed=5)
    cases = {name: bundling.eager_cases(model, name, inputs[name]) for name in inputs}
    good = directory / "good.bpte"
    good.write_bytes(bundling.bundle(exported.pte, cases))
    wrong_inputs, outputs = cases["mix"][1]
    wrong = outputs[0].clone()
    wrong[2, 7] += 1.0
    bad = directory / "bad.bpte"
    bad.write_bytes(bundling.bundle(exported.pte, {"forward": cases["forward"],
                                                   "mix": [cases["mix"][0], (wrong_inputs, [wrong])]}))
    return good, bad, exported.pte


def test_a_good_bundle_passes_every_case_and_exits_0(bundles):
    good, _, _ = bundles
    assert {n: len(s.test_cases) for n, s in BundledFile(good).suites.items()} == {"forward": 3, "mix": 3}
    result = runner.invoke(app, ["test", str(good)])
    assert result.exit_code == 0, result.output
    assert result.output.count(" pass ") == 6 and "FAIL" not in result.output
    assert "6 passed, 0 failed" in result.output and "forward" in result.output and "mix" in result.output


def test_a_failing_case_is_shown_and_exits_1(bundles):
    _, bad, _ = bundles
    result = runner.invoke(app, ["test", str(bad)])
    assert result.exit_code == 1, result.output
    assert result.output.count("FAIL") == 1 and "4 passed, 1 failed" in result.output
    assert "worst at [2, 7]" in " ".join(result.output.split())  # the table wraps the detail
    # A wider tolerance passes it.
    assert runner.invoke(app, ["test", str(bad), "--atol", "1.5"]).exit_code == 0


def test_json_lists_each_case_with_its_outputs(bundles):
    _, bad, _ = bundles
    result = runner.invoke(app, ["test", str(bad), "--json", "--method", "mix"])
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert (report["passed"], report["failed"]) == (1, 1)
    failing = [case for case in report["cases"] if not case["passed"]]
    assert [(c["method"], c["index"]) for c in failing] == [("mix", 1)]
    (output,) = failing[0]["outputs"]
    assert output["mismatched"] == 1 and output["numel"] == 24 and failing[0]["max_abs_error"] == pytest.approx(1.0)


@pytest.mark.parametrize("make, message", [
    (lambda pte, tmp: pte, "is a program (.pte"),
    (lambda pte, tmp: _write(tmp / "cut.bpte", pte.read_bytes()[:3]), "InvalidProgram 0x23"),
    (lambda pte, tmp: tmp / "missing.bpte", "does not exist"),
])
def test_a_bad_file_is_one_error_line(bundles, tmp_path, make, message):
    path = make(bundles[2], tmp_path)
    result = runner.invoke(app, ["test", str(path)])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and message in lines[0], result.output
    assert "Traceback" not in result.output


def test_an_unknown_method_is_one_error_line(bundles):
    result = runner.invoke(app, ["test", str(bundles[0]), "--method", "nope"])
    assert result.exit_code == 1 and result.output.startswith("error: --method 'nope'")


def _write(path, data: bytes):
    path.write_bytes(data)
    return path


def test_weights_in_a_data_file_come_from_data(tmp_path):
    exported, model = bundling.two_methods(external_constants=True)
    assert exported.ptd, "the exporter put the weights in a .ptd"
    inputs = bundling.two_methods_inputs(2, seed=6)
    path = tmp_path / "external.bpte"
    path.write_bytes(bundling.bundle(exported.pte, {n: bundling.eager_cases(model, n, inputs[n]) for n in inputs}))
    result = runner.invoke(app, ["test", str(path), "--data", str(exported.ptd[0])])
    assert result.exit_code == 0 and "4 passed, 0 failed" in result.output, result.output
    without = runner.invoke(app, ["test", str(path)])
    assert without.exit_code == 1 and "FAIL" in without.output, without.output
