"""Quantized programs lowered to XNNPACK: pterun against ExecuTorch's XNNPACK runtime, same .pte, same threads.

    PTERUN_PROGRAM_CACHE=... python bench/quantized.py [--threads 1,2] [--repeat 200] [--programs a,b] [--real [DIR]]

Static int8 (per-channel and per-tensor weights), dynamic int8 and 8da4w (int8 rows quantized at run
time, 4-bit weights in blocks of 32) programs: the test corpus's small ones and larger ones of the same
kinds; with --real, also the realistic models' quantized variants bench/export.py --real writes (those
exported so far). Both runtimes run in this process on the same inputs, interleaved call by call
(pterun.cli.timing), at each thread count (torch's intra-op threads for pterun, ExecuTorch's
threadpool for XNNPACK), OpenMP's workers sleeping when idle. The ratio is pterun's median over
ExecuTorch's: below 1.0 pterun is faster.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from types import SimpleNamespace

# Both runtimes' workers share the cores: OpenMP workers spinning between pterun's calls starve
# ExecuTorch's threadpool (and the reverse), by orders of magnitude on a busy machine. Before torch loads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, console, environment, report  # noqa: E402

import pterun  # noqa: E402
from pterun.cli.timing import Way, measure  # noqa: E402
from tests.backends.xnnpack.programs import (  # noqa: E402
    export_8da4w,
    export_quantized,
    partitioners,
    quantized_inputs,
)
from tests.support.exporting import ExportSpec, export_program  # noqa: E402
from tests.support.models.small import BranchyConvNet, ResidualMLP, SwiGLUMLP  # noqa: E402
from tests.support.quantizing import quantize  # noqa: E402


def _large_mlp(scheme: str):
    def make() -> ExportSpec:
        torch.manual_seed(0)
        module = ResidualMLP(512, 2048, 512).eval()
        data = [(torch.randn(32, 512, generator=torch.Generator().manual_seed(s)),) for s in range(5)]
        return ExportSpec(quantize(module, data[0], data[1:], scheme, by_range=False), data[0], lower=partitioners)

    return export_program(f"bench-xnnpack-q-mlp512-{scheme}", make), [torch.randn(32, 512)]


def _large_convnet(scheme: str):
    def make() -> ExportSpec:
        torch.manual_seed(0)
        data = [(torch.randn(1, 3, 128, 128, generator=torch.Generator().manual_seed(s)),) for s in range(5)]
        module = quantize(BranchyConvNet().eval(), data[0], data[1:], scheme, by_range=False)
        return ExportSpec(module, data[0], lower=partitioners)

    return export_program(f"bench-xnnpack-q-convnet128-{scheme}", make), [torch.randn(1, 3, 128, 128)]


def _swiglu_8da4w(rows: int):
    def make() -> ExportSpec:
        from torchao.quantization import quantize_
        from torchao.quantization.granularity import PerGroup
        from torchao.quantization.quant_api import Int8DynamicActivationIntxWeightConfig

        torch.manual_seed(0)
        module = torch.nn.Sequential(SwiGLUMLP(512, 1536), SwiGLUMLP(512, 1536)).eval()
        config = Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(32))
        quantize_(module, config)
        return ExportSpec(module, (torch.randn(rows, 512),), lower=partitioners)

    return export_program(f"bench-xnnpack-8da4w-swiglu512-{rows}", make), [torch.randn(rows, 512)]


def _small(model: str, scheme: str):
    return export_quantized(model, scheme), list(quantized_inputs(model, 0))


PROGRAMS = {
    "convnet per-channel": lambda: _small("convnet", "per-channel"),
    "mlp per-tensor": lambda: _small("mlp", "per-tensor"),
    "mlp dynamic": lambda: _small("mlp", "dynamic"),
    "mlp 8da4w": lambda: (export_8da4w(), [torch.randn(8, 64)]),
    "convnet128 per-channel": lambda: _large_convnet("per-channel"),
    "mlp512 per-tensor": lambda: _large_mlp("per-tensor"),
    "mlp512 per-channel": lambda: _large_mlp("per-channel"),
    "mlp512 dynamic": lambda: _large_mlp("dynamic"),
    "swiglu512 8da4w x1": lambda: _swiglu_8da4w(1),
    "swiglu512 8da4w x32": lambda: _swiglu_8da4w(32),
}


def _exported(directory: Path, name: str, scheme: str):
    """A quantized variant bench/export.py --real wrote (None when it has not been exported)."""
    pte = directory / f"{name}.xnnpack-{scheme}.pte"
    if not pte.exists():
        return None
    return SimpleNamespace(pte=pte), torch.load(directory / f"{name}.inputs.pt")


REAL = [("mobilenet_v2", "int8"), ("resnet18", "int8"), ("resnet50", "int8"), ("bert_base", "int8-dynamic"),
        ("llama100m", "int8-dynamic"), ("llama100m", "8da4w"), ("llama100m_decode", "8da4w")]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--programs", default=",".join(PROGRAMS))
    parser.add_argument("--json", type=Path)
    parser.add_argument("--real", type=Path, nargs="?", const=ROOT / ".cache" / "bench",
                        help="also the realistic models' quantized variants bench/export.py --real wrote there")
    args = parser.parse_args()
    from executorch.extension.pybindings import portable_lib

    programs = {name: PROGRAMS[name]() for name in args.programs.split(",") if name}
    if args.real:
        for name, scheme in REAL:
            found = _exported(args.real, name, scheme)
            if found is not None:
                programs[f"{name} {scheme}"] = found
    for threads in (int(t) for t in args.threads.split(",")):
        torch.set_num_threads(threads)
        portable_lib._unsafe_reset_threadpool(threads)
        console.print(environment())
        rows = {}
        for name, (exported, inputs) in programs.items():
            method = pterun.Runtime.get().load_program(exported.pte).load_method("forward")
            reference = portable_lib._load_for_executorch(str(exported.pte))
            rows[name] = measure([
                Way("pterun", lambda method=method, inputs=inputs: method.execute(inputs, clone_outputs=False)),
                Way("executorch-xnnpack",
                    lambda reference=reference, inputs=inputs: reference.forward(inputs, clone_outputs=False)),
            ], warmup=args.warmup, repeat=args.repeat)
        out = args.json.with_suffix(f".t{threads}.json") if args.json else None
        report(f"quantized XNNPACK programs, {threads} thread(s): median ms per call", rows, "pterun",
               ["executorch-xnnpack"], out)


if __name__ == "__main__":
    main()
