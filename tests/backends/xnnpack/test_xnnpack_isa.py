"""Quantized programs are exact on every CPU: what this CPU decides (``nodes/isa.py``), proven under other
instruction sets on any machine.

* ``decide`` is tested as a function of a CPU's features and of what the probes found.
* Subprocesses run the quantized programs on pterun and on ExecuTorch's runtime under oneDNN's and ATen's
  instruction-set ceilings (``ONEDNN_MAX_CPU_ISA``, ``ATEN_CPU_CAPABILITY``), each ceiling this CPU supports:
  below VNNI oneDNN's integer products saturate (asserted: the premise), pterun must notice and stay exact,
  and its outputs must be the same bits under every ceiling.
* One subprocess runs them on an emulated AVX2 CPU (``qemu-x86_64 -cpu max``: AVX2, no AVX-512), where
  ExecuTorch's XNNPACK picks its AVX2 kernels, as on an AVX2-only machine: pterun must match those too, its
  float elementwise kernels (sigmoid, rsqrt, softmax, ...) and its native 8-bit convolutions, adds and
  multiplies in their AVX2 forms included. CI installs qemu; elsewhere the test is
  skipped without it.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pterun.backends.xnnpack.nodes import isa
from tests.backends.xnnpack.programs import (
    export_8da4w,
    export_8da4w_wide,
    export_elementwise,
    export_float_convs,
    export_float_mlp,
    export_quantized,
)
from tests.support.ci import on_ci

ROOT = Path(__file__).resolve().parents[3]
X86 = platform.machine() in ("x86_64", "AMD64")
AVX2_ONLY = frozenset({"avx2", "fma3"})
AVX512 = AVX2_ONLY | {"avx512_f", "avx512_bw", "avx512_dq", "avx512_vl"}
VNNI = AVX512 | {"avx512_vnni"}


@pytest.mark.parametrize(("name", "features", "machine", "probes", "expected"), [
    ("AVX2 (Zen 2, Haswell)", AVX2_ONLY, "x86_64", (True, False), ("avx2", False, False)),
    ("AVX-512 without VNNI (Skylake-X)", AVX512, "x86_64", (False, False), ("avx2", False, False)),
    ("AVX-512 VNNI", VNNI, "x86_64", (True, True), ("avx512vnni", True, True)),
    ("AVX-512 VNNI under a oneDNN ceiling", VNNI, "x86_64", (False, False), ("avx512vnni", False, False)),
    ("AVX-VNNI only (Alder Lake)", AVX2_ONLY | {"avx_vnni"}, "x86_64", (True, True), ("avx2", False, True)),
    ("AMX", VNNI | {"amx_int8"}, "x86_64", (True, True), ("avx512vnni", True, True)),
    ("AArch64", frozenset(), "aarch64", (True, False), ("other", True, False)),
])
def test_what_a_cpu_decides(name, features, machine, probes, expected):
    cpu = isa.decide(features, machine, *probes)
    assert (cpu.block_kernels, cpu.int_mm, cpu.onednn) == expected, name
    assert cpu.block_kernels in cpu.summary and machine in cpu.summary
    if not cpu.integer_products:
        assert "as floats" in cpu.summary


@pytest.mark.parametrize(("features", "machine", "expected"), [
    (AVX2_ONLY, "x86_64", "avx2"),
    (AVX512, "x86_64", "avx512f"),
    (VNNI | {"amx_int8"}, "x86_64", "avx512f"),
    (AVX2_ONLY | {"avx_vnni"}, "x86_64", "avx2"),
    (frozenset({"avx2"}), "x86_64", "other"),  # no FMA3: XNNPACK's AVX kernels, which pterun does not repeat
    (frozenset(), "x86_64", "other"),
    (AVX512, "aarch64", "other"),
])
def test_which_float_kernels_a_cpu_runs(features, machine, expected):
    """XNNPACK's float elementwise family: AVX-512F first, then AVX2 with FMA3."""
    assert isa.float_kernels(features, machine) == expected
    assert isa.decide(features, machine, False, False).float_kernels == expected


def _saturating(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """u8 x s8 products as vpmaddubsw makes them: rows shifted to unsigned, adjacent pairs summed in int16 with
    saturation, then the pairs summed in int32, and the shift taken back."""
    xu = (x.long() + 128)
    pairs = (xu.view(x.shape[0], 1, -1, 2) * w.long().view(1, w.shape[0], -1, 2)).sum(3).clamp(-32768, 32767)
    return pairs.sum(2) - 128 * w.long().sum(1)


def test_the_probe_sees_saturating_pair_sums():
    assert not isa._probe(_saturating)
    assert isa._probe(lambda x, w: x.long() @ w.long().t())


def test_this_process_decides_from_this_cpu():
    cpu = isa.cpu()
    assert cpu is isa.cpu()  # decided once
    assert cpu.features == isa.features()
    if X86 and "avx512_vnni" in cpu.features and "ONEDNN_MAX_CPU_ISA" not in os.environ:
        assert cpu.int_mm and cpu.onednn, cpu.summary  # the premise of the integer-product tests
    if X86 and "avx512_vnni" not in cpu.features:
        assert not cpu.int_mm, cpu.summary  # torch's scalar loop: exact, but slower than float products


# -- other instruction sets, in subprocesses --------------------------------------------------------------------

@pytest.fixture(scope="module")
def programs(tmp_path_factory) -> Path:
    """Every case of isa_run.py exported, as the JSON file its command line takes."""
    paths = {f"{m}-{s}": str(export_quantized(m, s).pte) for m, s in (
        ("mlp", "per-channel"), ("mlp256", "per-tensor"), ("mlp256", "per-channel"), ("mlp256", "dynamic"),
        ("convnet", "per-channel"), ("mobilenet", "per-channel"), ("regnet", "per-channel"))}
    paths["8da4w"], paths["8da4w-wide"] = str(export_8da4w().pte), str(export_8da4w_wide().pte)
    paths["elementwise"] = str(export_elementwise().pte)
    paths["float-mlp"], paths["float-convs"] = str(export_float_mlp().pte), str(export_float_convs().pte)
    listing = tmp_path_factory.mktemp("isa") / "programs.json"
    listing.write_text(json.dumps(paths))
    return listing


def _run(listing: Path, env: dict[str, str], prefix: tuple[str, ...] = (), cases: set[str] | None = None) -> dict:
    if cases is not None:
        chosen = {k: v for k, v in json.loads(listing.read_text()).items() if k in cases}
        listing = listing.with_name(f"programs-{len(chosen)}.json")
        listing.write_text(json.dumps(chosen))
    environ = {k: v for k, v in os.environ.items() if k not in ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY")}
    done = subprocess.run([*prefix, sys.executable, "-m", "tests.backends.xnnpack.isa_run", str(listing)],
                          cwd=ROOT, env={**environ, **env}, capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _assert_exact(report: dict, where: str) -> None:
    for case, result in report["cases"].items():
        if result["check"] in ("exact", "bits"):
            assert result["results"] == [0] * len(result["results"]), f"{where}, {case}: {result}"
        else:
            assert max(result["results"]) <= 1e-6, f"{where}, {case}: {result}"


@pytest.fixture(scope="module")
def native(programs) -> dict:
    report = _run(programs, {})
    _assert_exact(report, "no ceiling")
    return report


def _ceilings() -> list[tuple[str, str, str]]:
    """(oneDNN ceiling, ATen capability, ATen's name for it) for each ceiling this CPU supports."""
    found = isa.features()
    ceilings = [("AVX2", "avx2", "AVX2")] if "avx2" in found else []
    if "avx512_f" in found:
        ceilings.append(("AVX512_CORE", "avx512", "AVX512"))
    if "avx512_vnni" in found:
        ceilings.append(("AVX512_CORE_VNNI", "avx512", "AVX512"))
    return ceilings


@pytest.mark.skipif(not X86, reason="the ceilings are x86-64 instruction sets")
@pytest.mark.parametrize(("onednn", "aten", "aten_name"), _ceilings(), ids=[c[0] for c in _ceilings()])
def test_exact_under_an_instruction_set_ceiling(programs, native, onednn, aten, aten_name):
    report = _run(programs, {"ONEDNN_MAX_CPU_ISA": onednn, "ATEN_CPU_CAPABILITY": aten})
    # the premise: the process ran under the ceiling
    assert report["aten"] == aten_name, report
    vnni = "VNNI" in onednn or "AMX" in onednn
    if "avx512_vnni" in report["features"] and not vnni:
        assert not report["onednn_exact"], "oneDNN's products did not saturate: the ceiling did not take"
    if not vnni:
        assert not report["int_mm"] and not report["onednn"], report
    _assert_exact(report, f"under {onednn}")
    for case, result in report["cases"].items():  # the same CPU's XNNPACK kernels: the same bits as without
        assert result["digest"] == native["cases"][case]["digest"], f"{case} under {onednn}"


QEMU = shutil.which("qemu-x86_64")
# qemu is slow: the cases that cover every kind of product once
EMULATED = {"mlp256-per-channel", "mlp256-dynamic", "convnet-per-channel", "regnet-per-channel", "8da4w",
            "8da4w-wide", "elementwise", "float-mlp", "float-convs"}


@pytest.mark.slow
@pytest.mark.skipif(not X86, reason="emulates an x86-64 CPU")
def test_exact_on_an_emulated_avx2_cpu(programs, native):
    if QEMU is None:
        message = "qemu-x86_64 is not installed (apt-get install qemu-user)"
        if on_ci():
            pytest.fail(f"{message}; on CI (CI=true) it must be (.ci/run installs it)", pytrace=False)
        pytest.skip(message)
    report = _run(programs, {}, prefix=(QEMU, "-cpu", "max"), cases=EMULATED)
    # the premise: an AVX2 CPU without AVX-512, on which oneDNN's u8 x s8 products saturate
    assert "avx2" in report["features"] and "avx512_f" not in report["features"], report
    assert report["aten"] == "AVX2" and report["block_kernels"] == "avx2", report
    assert report["float_kernels"] == "avx2", report  # XNNPACK's AVX2 sigmoid, rsqrt, softmax, ...
    assert all("XNNPACK's avx2 float" in r for r in report["cases"]["elementwise"]["routes"]), report
    # XNNPACK's AVX2 products (fma3 GEMM and IGEMM kernels), to the bit
    assert "XNNPACK's avx2 float fully connected product (native)" in report["cases"]["float-mlp"]["routes"], report
    assert "XNNPACK's avx2 float convolution (native)" in report["cases"]["float-convs"]["routes"], report
    # the native 8-bit kernels take their AVX2 forms: convolutions (dense, grouped, depthwise), adds, multiplies
    native_routes = [r for case in ("convnet-per-channel", "regnet-per-channel")
                     for r in report["cases"][case]["routes"] if r.startswith("native")]
    assert {"native int8 grouped convolution (avx2)", "native int8 depthwise convolution (avx2)",
            "native int8 add (avx2)", "native int8 mul (avx2)"} <= set(native_routes), report
    assert all(r.endswith("(avx2)") for r in native_routes), native_routes
    assert not report["onednn_exact"] and not report["int_mm"] and not report["onednn"], report
    _assert_exact(report, "on an emulated AVX2 CPU")
    # integer results: the same bits on every CPU (XNNPACK's float kernels differ between its families)
    for case in EMULATED - {"8da4w", "8da4w-wide", "elementwise", "float-mlp", "float-convs"}:
        assert report["cases"][case]["digest"] == native["cases"][case]["digest"], case
