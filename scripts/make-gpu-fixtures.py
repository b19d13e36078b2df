"""Exports the programs the GPU suite runs, with inputs and ExecuTorch's outputs for them.

The GPU machine has no ExecuTorch, so everything that needs it is done here:
each program is exported, run on ExecuTorch's CPU runtime (the reference), and
written with its inputs and expected outputs under ``fixtures/gpu`` (git-ignored),
which travels with the working tree to the GPU machine:

    corpus/<model>/   every model of tests/support/models/ (portable lowering)
    half/<model>-<dtype>/  models with normalization layers converted to float16 and bfloat16
    cuda/<case>/      programs lowered with pterun.export.CudaPartitioner
    fuzz/seed-<n>/    random programs of the fuzzer's GPU seeds (tests/fuzz/seeds.py), portable, with spec.json
    cache/            exported programs the delegate backends' GPU tests load (PTERUN_PROGRAM_CACHE)
    llm/<program>/    language models (program.pte, tokenizer.json) for pterun.llm on the GPU
    multimodal/<model>/  the LLaVA and Voxtral programs of tests/llm (program.pte, tokenizer.json, spec.json)
                      for pterun.llm's MultimodalRunner on the GPU
    asr/whisper/      the tiny Whisper of tests/asr (program.pte, tokenizer.json) for pterun.asr on the GPU
    wheels/           wheels of the packages pterun.llm needs (pytorch-tokenizers), for the GPU machine's
                      Python, which has no package index; scripts/gpu-tests.sh installs them
    export-wheels/    ExecuTorch's wheels and what its CUDA export imports, for that Python:
                      scripts/gpu-tests.sh installs them apart and runs scripts/export-et-cuda.py, which
                      exports ExecuTorch CUDA programs (et_cuda/) on the GPU they run on

Each directory holds program.pte (+ any .ptd), calls.pt (a list of input lists,
called in order on one method) and expected.pt (ExecuTorch's outputs per call).
Run it with the test extras installed; set PTERUN_PROGRAM_CACHE to reuse exports.

    python scripts/make-gpu-fixtures.py [OUT] [--parts cuda,corpus,...] [--models llama,stablelm]

``--parts`` makes only those parts (all by default) and ``--models`` only what it names: models of the
corpus and the half-precision set, the delegate tests' cases (``8da4w``, ``llama_dynamic``, ...) and fuzz
seeds (``seed-100594``); what other parts made before stays (a full run starts from an empty OUT). The
test suite makes a small subset this way (tests/test_gpu_tools.py), so that what the GPU machine needs
cannot break unseen on a machine without one.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.differential import export_model, flat  # noqa: E402
from tests.support.exporting import ExportSpec, export_program  # noqa: E402
from tests.support.models import MODELS, build  # noqa: E402
from tests.support.models.small import SwiGLUMLP  # noqa: E402
from tests.support.oracle import reference_module  # noqa: E402

SEEDS = (0, 1)


def write(directory: Path, pte: Path, ptd: list[Path], calls: list[list], expected: list[list]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copy(pte, directory / "program.pte")
    for data in ptd:
        shutil.copy(data, directory / data.name)
    torch.save(calls, directory / "calls.pt")
    torch.save(expected, directory / "expected.pt")


def reference_calls(pte: Path, ptd: list[Path], calls: list[list], method: str = "forward") -> list[list]:
    module = reference_module(pte, ptd)  # one module: programs with state see the calls in order
    return [list(module.run_method(method, [a.clone() if isinstance(a, torch.Tensor) else a for a in args]))
            for args in calls]


def corpus(out: Path, models: set[str] | None = None) -> None:
    for name in sorted(m for m in MODELS if models is None or m in models):
        exported = export_model(name, "portable")
        make_inputs = build(name).make_inputs
        calls = [flat(make_inputs(seed)) for seed in SEEDS]
        try:
            expected = reference_calls(exported.pte, exported.ptd, calls)
        except RuntimeError as exc:  # ExecuTorch's portable kernels refuse a few models (dinov2's dim orders)
            print("corpus", name, "skipped: ExecuTorch cannot run it:", str(exc).splitlines()[0])
            continue
        write(out / "corpus" / name, exported.pte, exported.ptd, calls, expected)
        print("corpus", name)


# Models whose normalization layers (layer, batch and group norm) write statistics in the program's dtype.
HALF_MODELS = ("bert", "gpt2", "vit", "mobilenet_v2", "et_mobilenet_v1_025", "resnet", "convnext", "llama",
               "stablelm", "wav2vec2")
HALF_DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}


def _cast(values, dtype):
    return [v.to(dtype) if isinstance(v, torch.Tensor) and v.is_floating_point() else v for v in values]


def half(out: Path, models: set[str] | None = None) -> None:
    for name in (m for m in HALF_MODELS if models is None or m in models):
        for label, dtype in HALF_DTYPES.items():
            def spec(name=name, dtype=dtype) -> ExportSpec:
                model = build(name)
                return ExportSpec(model.module.to(dtype), tuple(_cast(flat(model.example_inputs), dtype)))

            try:
                exported = export_program(f"gpu-half-{name}-{label}", spec)
                make_inputs = build(name).make_inputs
                calls = [_cast(flat(make_inputs(seed)), dtype) for seed in SEEDS]
                expected = reference_calls(exported.pte, exported.ptd, calls)
            except Exception as exc:  # noqa: BLE001 - a model ExecuTorch cannot run in half precision is skipped
                print("half", name, label, "skipped:", type(exc).__name__, str(exc).splitlines()[0][:200])
                continue
            write(out / "half" / f"{name}-{label}", exported.pte, exported.ptd, calls, expected)
            print("half", name, label)


def swiglu(out: Path) -> None:
    torch.manual_seed(0)
    # A SwiGLU MLP on one token: its products are one-row matmuls (the Triton matrix-vector kernel).
    module = SwiGLUMLP(256, 704).to(torch.bfloat16).eval()
    x = torch.randn(1, 256, dtype=torch.bfloat16)
    exported = export_program("gpu-swiglu-bf16", lambda: ExportSpec(module, (x,)))
    calls = [[x], [torch.randn(1, 256, dtype=torch.bfloat16)]]
    write(out / "half" / "swiglu-bfloat16", exported.pte, exported.ptd, calls,
          reference_calls(exported.pte, exported.ptd, calls))
    print("half swiglu bfloat16")
    # The same MLP over a dynamic number of rows (a prefill's tokens, then one): fused too, its out sized per call.
    # Exported with rows of 4: torch.export specializes a dimension its example gives as 1.
    rows = torch.export.Dim("rows", max=16)
    prefill = torch.randn(4, 256, dtype=torch.bfloat16)
    dynamic = export_program("gpu-swiglu-bf16-dynamic",
                             lambda: ExportSpec(module, (prefill,), dynamic_shapes=({0: rows},)))
    calls = [[torch.randn(5, 256, dtype=torch.bfloat16)], [x], [torch.randn(1, 256, dtype=torch.bfloat16)]]
    write(out / "half" / "swiglu-bfloat16-dynamic", dynamic.pte, dynamic.ptd, calls,
          reference_calls(dynamic.pte, dynamic.ptd, calls))
    print("half swiglu bfloat16 dynamic rows")


class Block(torch.nn.Module):
    """A residual MLP block: linear, SiLU-gated product, normalization."""

    def __init__(self, width: int = 64):
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.gate = torch.nn.Linear(width, 2 * width)
        self.up = torch.nn.Linear(width, 2 * width)
        self.down = torch.nn.Linear(2 * width, width)

    def forward(self, x, y):
        h = self.norm(x + y)
        return x + self.down(torch.nn.functional.silu(self.gate(h)) * self.up(h)), h.sum(-1)


def cuda_cases(out: Path) -> None:
    from pterun.export import CudaPartitioner, device_resident_options

    torch.manual_seed(0)
    module = Block().eval()
    inputs = (torch.randn(4, 64), torch.randn(4, 64))
    plain = export_program("gpu-block-plain", lambda: ExportSpec(module, inputs))
    calls = [list(inputs), [torch.randn(4, 64), torch.randn(4, 64)]]
    expected = reference_calls(plain.pte, plain.ptd, calls)
    variants = {
        # Method inputs and outputs on the GPU; outputs unplanned, tagged CUDA.
        "resident": device_resident_options(),
        # Host inputs and outputs, copied in and out by the program; a device-planned arena.
        "copies": {"enable_non_cpu_memory_planning": True},
    }
    for name, config in variants.items():
        exported = export_program(
            f"gpu-block-cuda-{name}",
            lambda config=config: ExportSpec(module, inputs, lower=lambda: [CudaPartitioner("cuda:0")], config=config),
        )
        write(out / "cuda" / name, exported.pte, exported.ptd, calls, expected)
        print("cuda", name)


def fuzz_programs(out: Path, names: set[str] | None = None) -> None:
    from tests.fuzz.builder import export_spec, make_inputs
    from tests.fuzz.generator import generate
    from tests.fuzz.runner import spec_key
    from tests.fuzz.seeds import GPU_SEEDS

    for seed in (s for s in GPU_SEEDS if names is None or f"seed-{s}" in names):
        spec = generate(seed)
        exported = export_program(spec_key(spec, "portable"), lambda spec=spec: export_spec(spec, "portable"))
        calls = [make_inputs(spec, k) for k in range(spec.calls)]
        directory = out / "fuzz" / f"seed-{seed}"
        write(directory, exported.pte, exported.ptd, calls, reference_calls(exported.pte, exported.ptd, calls))
        (directory / "spec.json").write_text(spec.dumps())
        print("fuzz", seed)


def delegate_programs(out: Path, names: set[str] | None = None) -> None:
    """The programs the delegate backends' GPU tests export, in a program cache carried with the fixtures."""
    from tests.support import exporting

    saved, exporting._ROOT = exporting._ROOT, out / "cache"
    try:
        from tests.backends.xnnpack import test_xnnpack_gpu

        # Also the programs of tests/gpu/test_etdump_on_cuda.py's XNNPACK cases (resnet, q-convnet-per-channel).
        for name, (export, _) in test_xnnpack_gpu.CASES.items():
            if names is None or name in names:
                export()
                print("xnnpack", name)
        if names is None or "llama_dynamic" in names:
            test_xnnpack_gpu.export_model("llama_dynamic")  # test_dynamic_lengths_on_cuda
        if names is None or "8da4w" in names:
            test_xnnpack_gpu.export_8da4w_wide()  # test_4bit_layers_on_cuda_are_the_cpus_in_each_order
    finally:
        exporting._ROOT = saved


def llm_programs(out: Path) -> None:
    """Language models from the LLM exporters, each with its tokenizer, for pterun.llm's GPU tests."""
    from tests.support import llm_programs as programs

    made = {
        "transformers-static-cache": programs.transformers_program,
        "llama-dynamic": lambda: programs.llama_program("dynamic"),
        # 8da4w programs, for the 4-bit products on CUDA (tests/gpu/test_8da4w_on_cuda.py)
        "transformers-qwen2-8da4w": lambda: programs.transformers_program("qwen2-8da4w"),
        "transformers-smollm3-8da4w": lambda: programs.transformers_program("smollm3-8da4w"),
        "llama-xnnpack-8da4w": lambda: programs.llama_program("xnnpack-8da4w"),
        "llama-xnnpack-8da4w-quantized-kv": lambda: programs.llama_program("xnnpack-8da4w-quantized-kv"),
    }
    for name, make in made.items():
        program = make()
        directory = out / "llm" / name
        directory.mkdir(parents=True, exist_ok=True)
        shutil.copy(program.pte, directory / "program.pte")
        shutil.copy(program.tokenizer, directory / "tokenizer.json")
        print("llm", name)


def asr_programs(out: Path) -> None:
    """The tiny Whisper exported as optimum-executorch exports it, with its tokenizer, for pterun.asr's GPU test."""
    from tests.support import asr_programs as programs

    whisper = programs.whisper_program()
    directory = out / "asr" / "whisper"
    directory.mkdir(parents=True, exist_ok=True)
    shutil.copy(whisper.pte, directory / "program.pte")
    shutil.copy(whisper.tokenizer, directory / "tokenizer.json")
    print("asr whisper")


def multimodal_programs(out: Path) -> None:
    """The vision and audio language models of tests/llm (LLaVA and Voxtral from small configs), for
    pterun.llm's MultimodalRunner on the GPU: program.pte, tokenizer.json and spec.json (what
    tests.support.multimodal_programs.MultimodalProgram holds but its paths)."""
    import json

    from tests.support.multimodal_programs import multimodal_program

    for name in ("llava", "voxtral"):
        program = multimodal_program(name)
        directory = out / "multimodal" / name
        directory.mkdir(parents=True, exist_ok=True)
        shutil.copy(program.pte, directory / "program.pte")
        shutil.copy(program.tokenizer, directory / "tokenizer.json")
        spec = {"modality": program.modality, "media_tokens": program.media_tokens,
                "uint8_images": program.uint8_images}
        (directory / "spec.json").write_text(json.dumps(spec))
        print("multimodal", name)


# pterun.llm's tokenizers: built for the GPU machine's Python (3.12), which has no package index to install from.
GPU_PYTHON = "3.12"
GPU_WHEELS = ("pytorch-tokenizers==1.5.0",)
# ExecuTorch and what its CUDA export imports (scripts/export-et-cuda.py), about 23 MB; the GPU machine's torch,
# transformers and Triton are its own.
EXPORT_WHEELS = ("executorch==1.5.1", "torchao==0.18.0", "ruamel.yaml", "ruamel.yaml.clib", "omegaconf", "hydra-core",
                 "expecttest", "parameterized", "kgb")
GPU_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64",
                 "manylinux2014_x86_64", "any")


def wheels(out: Path) -> None:
    import subprocess

    for folder, names in (("wheels", GPU_WHEELS), ("export-wheels", EXPORT_WHEELS)):
        target = out / folder
        target.mkdir(parents=True, exist_ok=True)
        platforms = [arg for p in GPU_PLATFORMS for arg in ("--platform", p)]
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--python-version",
                        GPU_PYTHON, "--implementation", "cp", *platforms, "-d", str(target), *names], check=True)


PARTS = {"cuda": cuda_cases, "corpus": corpus, "half": half, "swiglu": swiglu, "fuzz": fuzz_programs,
         "delegates": delegate_programs, "llm": llm_programs, "asr": asr_programs, "multimodal": multimodal_programs,
         "wheels": wheels}


def main() -> None:
    parser = argparse.ArgumentParser(description="Exports the programs the GPU suite runs (see the docstring).")
    parser.add_argument("out", nargs="?", type=Path, default=ROOT / "fixtures" / "gpu")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of: {', '.join(PARTS)}")
    parser.add_argument("--models", default=None,
                        help="only these: corpus and half models, delegate cases, fuzz seeds (seed-N)")
    args = parser.parse_args()
    parts = args.parts.split(",")
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        parser.error(f"no part named {', '.join(unknown)}; parts: {', '.join(PARTS)}")
    models = None if args.models is None else set(args.models.split(","))
    out = args.out
    # Every part afresh clears what an older run left; fewer parts replace only their own files.
    if out.exists() and set(parts) == set(PARTS) and models is None:
        shutil.rmtree(out)
    for part in parts:
        if part in ("corpus", "half", "fuzz", "delegates"):
            PARTS[part](out, models)
        else:
            PARTS[part](out)
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    print(f"wrote {out} ({size / 2**20:.1f} MiB)")


if __name__ == "__main__":
    main()
