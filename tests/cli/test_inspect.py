"""`pterun inspect`: delegates counted, dynamic bounds, the memory plan (terminal, --plot, --json), names escaped."""

from __future__ import annotations

import json
import re
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

import pterun
from pterun.cli.main import app
from pterun.cli.options import example_program
from pterun.cli.report import visible
from pterun.format import Kind, ListValue, ProgramFile, TensorSpec
from tests.cli.programs import recorded_xnnpack_cnn

runner = CliRunner()


def _invoke(*args: str):
    result = runner.invoke(app, ["inspect", *args])
    assert result.exit_code == 0, result.output
    return result


def _words(output: str) -> str:
    """The output with Rich's line wrapping undone."""
    return " ".join(output.split())


def _json(*args: str) -> dict:
    return json.loads(_invoke("--json", *args).output)


def _independent_lifetimes(plan) -> dict[int, tuple[int, int]]:
    """First and last instruction naming each planned tensor (lists by their items); inputs from the start,
    outputs to the end, as ExecuTorch's exporter counts them."""
    named: dict[int, list[int]] = {}
    for n, ins in enumerate(plan.instructions):
        for vi in ins.args:
            value = plan.values[vi]
            lists = (Kind.TENSOR_LIST, Kind.OPTIONAL_TENSOR_LIST)
            items = value.items if isinstance(value, ListValue) and value.kind in lists else (vi,)
            for item in items:
                if item != -1:  # an optional list's None
                    named.setdefault(item, []).append(n)
    end = len(plan.instructions) - 1
    spans = {}
    for vi, value in enumerate(plan.values):
        if isinstance(value, TensorSpec) and value.memory_id is not None:
            first, last = min(named[vi]), max(named[vi])
            spans[vi] = (0 if vi in plan.inputs else first, end if vi in plan.outputs else last)
    return spans


def test_the_bundled_examples_plan_matches_one_computed_from_the_file():
    plan = ProgramFile(str(example_program())).plan("forward")
    assert {type(i).__name__ for i in plan.instructions} == {"KernelCall"}  # the premise: args are all there is
    spans = _independent_lifetimes(plan)
    (arena,) = _json()["methods"][0]["arenas"]
    assert arena["memory_id"] == 1 and arena["size"] == plan.buffer_sizes[1] and arena["device"] == "cpu"
    got = {t["value"]: t for t in arena["tensors"]}
    assert got.keys() == spans.keys() and len(got) > 400
    for vi, (first, last) in spans.items():
        spec = plan.values[vi]
        assert (got[vi]["offset"], got[vi]["nbytes"], got[vi]["first"], got[vi]["last"]) == (
            spec.memory_offset, spec.nbytes, first, last), vi
    # The exporter reuses the input's bytes after its last reader: it does not live the whole method.
    (inp,) = plan.inputs
    spec_in = plan.values[inp]
    assert any(plan.values[vi].memory_offset == spec_in.memory_offset and first > spans[inp][1]
               for vi, (first, _) in spans.items() if vi != inp)
    # Peak: the most bytes live tensors cover at one instruction, views and bases counted once.
    live = []
    for n in range(len(plan.instructions)):
        covered = np.zeros(arena["size"], dtype=bool)
        for vi, (first, last) in spans.items():
            if first <= n <= last:
                covered[plan.values[vi].memory_offset:plan.values[vi].memory_offset + plan.values[vi].nbytes] = True
        live.append(int(covered.sum()))
    assert arena["peak_live_bytes"] == max(live) and arena["peak_instruction"] == live.index(max(live))
    # One buffer per tensor: every tensor but the views et_view plans on its base's bytes.
    views = sum(plan.values[ins.args[-1]].nbytes for ins in plan.instructions
                if plan.operators[ins.op_index][0] == "executorch_prim::et_view")
    assert views > 0
    assert arena["unshared_bytes"] == sum(plan.values[vi].nbytes for vi in spans) - views
    assert arena["saved_bytes"] == arena["unshared_bytes"] - arena["size"] > 0


def test_the_terminal_shows_bounds_the_picture_its_legend_and_the_savings():
    output = _words(_invoke().output)
    assert "≤ [1, 64]" in output and "upper bound" in output  # the input's dynamic bound
    for fragment in ("arena 1 on cpu: 819,200 bytes", "peak live", "planning saves", "█", "0 B│",
                     "rows: byte offsets", "columns: instructions", "shade:", "largest: v"):
        assert fragment in output, fragment


def test_delegates_are_counted_per_backend():
    pte = str(recorded_xnnpack_cnn().pte)
    plan = ProgramFile(pte).plan("forward")
    assert [d.backend_id for d in plan.delegates] == ["XnnpackBackend"] * 2  # the premise: one backend, twice
    output = _invoke(pte).output
    assert "delegates: XnnpackBackend ×2" in output and "XnnpackBackend, XnnpackBackend" not in output
    assert _json(pte)["methods"][0]["delegates"] == {"XnnpackBackend": 2}


def test_code_says_how_each_quantized_product_computes_on_this_cpu():
    from pterun.backends.xnnpack.nodes import isa
    from tests.backends.xnnpack.programs import export_8da4w

    pte = str(export_8da4w().pte)
    output = _words(_invoke(pte, "--code").output)
    assert f"delegate 0: {isa.cpu().summary}" in output
    order = f"4-bit block product in the order of XNNPACK's {isa.cpu().block_kernels} kernels"
    assert output.count(order) == 2 and "node 1 (XNNFullyConnected, debug handle" in output


def test_code_says_how_attention_over_a_kv_cache_runs():
    from pterun.kernels.llm import attention
    from tests.support.llm_programs import llama_program

    pte = str(llama_program("dynamic").pte)
    plan = ProgramFile(pte).plan("forward")
    assert ("llama::custom_sdpa", "out") in plan.operators, "premise: the program calls custom_sdpa"
    output = _words(_invoke(pte, "--code").output)
    assert f"attention over a KV cache (float32, CPU): {attention.route()}" in output
    assert "pterun's native code, its products in PyTorch's sgemm_" in attention.route()


def test_code_says_how_fused_rms_norm_and_rotary_run():
    from pterun.kernels import fused
    from tests.support.llm_programs import llama_program

    pte = str(llama_program("dynamic").pte)
    steps = {getattr(s, "name", "") for s in pterun.Runtime.get().load_program(pte).load_method("forward").steps}
    assert set(fused.FUSED_ON_THE_CPU) <= steps, "premise: the program's RMSNorms and rotary embeddings are fused"
    output = _words(_invoke(pte, "--code").output)
    assert f"fused RMSNorm and rotary (float32, CPU): {fused.route()}" in output
    assert "pterun's native code, each step rounded as PyTorch's" in fused.route()


def test_json_has_the_documented_keys():
    document = _json()
    assert document["schema"] == "pterun.inspect/1"
    assert set(document) == {"schema", "program", "methods"}
    assert set(document["program"]) == {"path", "bytes"}
    (method,) = document["methods"]
    assert set(method) == {"name", "inputs", "outputs", "instructions", "operators", "delegates", "arenas"}
    assert method["inputs"] == [{"kind": "Tensor", "dtype": "Long", "sizes": [1, 64], "dim_order": [0, 1],
                                 "dynamism": "bounded", "planned": True, "nbytes": 512}]
    assert "aten::mm.out" in method["operators"] and method["delegates"] == {}
    (arena,) = method["arenas"]
    assert set(arena) == {"memory_id", "size", "device", "peak_live_bytes", "peak_instruction", "unshared_bytes",
                          "saved_bytes", "tensors"}
    assert set(arena["tensors"][0]) == {"value", "name", "role", "offset", "nbytes", "first", "last"}
    assert {t["role"] for t in arena["tensors"]} == {"input", "output", "temporary"}


def test_plot_writes_an_svg_with_one_rectangle_per_tensor_and_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    tensors = _json()["methods"][0]["arenas"][0]["tensors"]
    svg, png = tmp_path / "plan.svg", tmp_path / "plan.png"
    assert f"({len(tensors)} tensors)" in _words(_invoke("--plot", str(svg)).output)
    text = svg.read_text()
    assert text.startswith("<?xml") and "<svg" in text
    assert sorted(int(v) for v in re.findall(r'id="tensor-(\d+)"', text)) == sorted(t["value"] for t in tensors)
    _invoke("--plot", str(png))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000


def test_plot_without_matplotlib_is_one_error_line(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # an import of it, or of a submodule, fails
    result = runner.invoke(app, ["inspect", "--plot", str(tmp_path / "plan.svg")])
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --plot needs matplotlib"), result.output
    assert "pterun[plot]" in lines[0] and not (tmp_path / "plan.svg").exists()


def test_plot_names_an_unknown_format(tmp_path):
    result = runner.invoke(app, ["inspect", "--plot", str(tmp_path / "plan.gif")])
    assert result.exit_code == 1 and result.output.startswith("error: --plot") and ".svg or .png" in result.output


HOSTILE_BUFFER = "\x1b[2J[bold]$\\frac{a}{b}$[/bold]cache"
HOSTILE_METHOD = "\x1b]0;PWNED\x07[/red]$x$"


def _hostile(tmp_path):
    from tests.format import build
    from tests.format.build import Tensor

    plan = build.Plan(name=HOSTILE_METHOD, values=[Tensor(memory=(1, 0)), Tensor(memory=(1, 8), fqn=HOSTILE_BUFFER)],
                      inputs=[0], outputs=[0], buffer_sizes=[0, 16])
    path = tmp_path / "hostile.pte"
    path.write_bytes(build.program([plan]))
    return path


def test_names_in_the_plan_stay_escaped(tmp_path):
    path = _hostile(tmp_path)
    (arena,) = _json(str(path))["methods"][0]["arenas"]
    assert [t["name"] for t in arena["tensors"]] == ["v0", HOSTILE_BUFFER]  # the premise: the name as written
    assert arena["tensors"][1]["role"] == "mutable"
    output = _invoke(str(path)).output
    assert not any(ch in output for ch in "\x1b\x07"), repr(output)
    flat = output.replace("\n", "")
    for name in (HOSTILE_BUFFER, HOSTILE_METHOD):
        assert visible(name) in flat, name
    pytest.importorskip("matplotlib")
    svg = tmp_path / "plan.svg"
    _invoke(str(path), "--plot", str(svg))
    assert "\x1b" not in svg.read_text() and svg.read_text().count('id="tensor-') == 2

