"""The CPU half of every GPU tool, on a small subset, so that what the GPU machine needs cannot break unseen.

The GPU machine has no ExecuTorch: what it runs is exported here, by scripts/make-gpu-fixtures.py (the GPU
suite's programs), bench/export.py (bench/gpu.py's) and bench/llm_gpu.py's export step; scripts/export-et-cuda.py
exports on the GPU itself, and its model-building half runs here (--check). Every bench script and GPU
script also answers --help on a machine without a GPU or Triton.
"""

from __future__ import annotations

import lzma
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import pterun
from pterun.format import Dynamism, ProgramFile
from tests.support import exporting

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def _run(*args: str, timeout: int = 1200) -> subprocess.CompletedProcess:
    # The run's program cache: the models the rest of the suite exports are not exported twice.
    env = dict(os.environ, PTERUN_PROGRAM_CACHE=str(exporting.cache_root()),
               PYTHONPATH=os.pathsep.join([str(REPO / "src"), str(REPO), os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == 0, f"{' '.join(args)}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def test_the_gpu_fixture_script_makes_every_part_of_a_subset(tmp_path):
    out = tmp_path / "gpu"
    _run("scripts/make-gpu-fixtures.py", str(out), "--parts",
         "cuda,corpus,half,swiglu,fuzz,delegates,llm,asr,multimodal", "--models", "llama,8da4w,seed-100594")
    expected = ["cuda/resident", "cuda/copies", "corpus/llama", "half/llama-float16",
                "half/llama-bfloat16", "half/swiglu-bfloat16", "half/swiglu-bfloat16-dynamic", "fuzz/seed-100594"]
    for name in expected:
        directory = out / name
        for file in ("program.pte", "calls.pt", "expected.pt"):
            assert (directory / file).is_file(), f"{name}/{file}"
        ProgramFile(directory / "program.pte").plan("forward")
    for name in ("transformers-static-cache", "llama-dynamic", "transformers-qwen2-8da4w", "transformers-smollm3-8da4w",
                 "llama-xnnpack-8da4w", "llama-xnnpack-8da4w-quantized-kv"):
        assert (out / "llm" / name / "program.pte").is_file() and (out / "llm" / name / "tokenizer.json").is_file()
    assert all((out / "asr" / "whisper" / name).is_file() for name in ("program.pte", "tokenizer.json"))
    for name in ("llava", "voxtral"):
        assert all((out / "multimodal" / name / file).is_file() for file in ("program.pte", "tokenizer.json",
                                                                            "spec.json"))
    assert any((out / "cache").iterdir()), "the delegate tests' program cache"
    # The fixture the SwiGLU kernel's dynamic test needs: rows really dynamic (an example of one row was
    # specialized to one by torch.export).
    plan = ProgramFile(out / "half" / "swiglu-bfloat16-dynamic" / "program.pte").plan("forward")
    rows = plan.values[plan.inputs[0]]
    assert rows.dynamism == Dynamism.DYNAMIC_BOUND and rows.sizes[0] == 16


def test_bench_gpus_programs_are_exported_as_it_reads_them(tmp_path):
    _run("bench/export.py", "--out", str(tmp_path), "--models", "tiny_mlp")
    pte = lzma.decompress((tmp_path / "gpu" / "tiny_mlp.pte.xz").read_bytes())
    inputs = torch.load(tmp_path / "tiny_mlp.inputs.pt", weights_only=False)
    outputs = pterun.Runtime.get().load_program(pte).load_method("forward").execute(inputs)
    assert outputs and all(torch.isfinite(o).all() for o in outputs)


@pytest.mark.parametrize("quant", ["bf16", "8da4w"])
def test_bench_llm_gpus_export_step_writes_a_program_the_runner_generates_from(tmp_path, quant):
    from pterun.llm import GenerationConfig, TextLLMRunner

    _run("bench/llm_gpu.py", "export", "--out", str(tmp_path), "--size", "tiny",
         *(["--quant", quant] if quant != "bf16" else []))
    pte = tmp_path / "program.pte"
    pte.write_bytes(lzma.decompress((tmp_path / f"hf_llamatiny.{quant}.pte.xz").read_bytes()))
    assert bool(ProgramFile(pte).plan("forward").delegates) == (quant == "8da4w")
    runner = TextLLMRunner(str(pte), str(tmp_path / "tokenizer.tiny.json"))
    pieces: list[str] = []
    runner.generate("Hello", GenerationConfig(max_new_tokens=4, temperature=0.0, echo=False),
                    token_callback=pieces.append)
    assert len(pieces) == 4
    if quant == "bf16":  # the compile's start, cold and again, each in a process of its own
        result = _run("bench/llm_gpu.py", "startup", "--dir", str(tmp_path), "--sizes", "tiny", "--device", "cpu")
        assert "tiny cold: " in result.stdout and "tiny again: " in result.stdout, result.stdout


def test_the_et_cuda_export_builds_and_traces_every_model():
    result = _run("scripts/export-et-cuda.py", "--check")
    for name in ("mlp", "mlp_bf16", "conv", "attention", "dynamic", "mixed", "resident", "decoder"):
        assert f"{name}: traced" in result.stdout, result.stdout


SCRIPTS = sorted([*(p for p in (REPO / "bench").glob("*.py") if '__name__ == "__main__"' in p.read_text()),
                  REPO / "scripts" / "make-gpu-fixtures.py", REPO / "scripts" / "export-et-cuda.py"])
_HELP = """
import contextlib, io, runpy, sys
failed = []
for path in sys.argv[1:]:
    sys.argv[:] = [path, "--help"]
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            runpy.run_path(path, run_name="__main__")
        failed.append(f"{path}: ran instead of explaining itself")
    except SystemExit as exit:
        if exit.code not in (0, None) or "usage:" not in out.getvalue():
            failed.append(f"{path}: exit {exit.code!r}")
    except Exception as error:
        failed.append(f"{path}: {type(error).__name__}: {error}")
print("\\n".join(failed) or "all explained")
"""


def test_every_bench_and_gpu_script_answers_help():
    """--help of each, in one interpreter (each script's imports, argument parser and description), here where
    there is no GPU and no Triton."""
    assert len(SCRIPTS) > 10, "premise: the bench scripts were found"
    result = _run("-c", _HELP, *(str(p.relative_to(REPO)) for p in SCRIPTS), timeout=600)
    assert result.stdout.strip().endswith("all explained"), result.stdout
