"""Exports the benchmark set (bench/models.py) with ExecuTorch: portable, XNNPACK-lowered and quantized programs.

    python bench/export.py [--out .cache/bench] [--models a,b] [--real]

Writes OUT/<model>.pte, OUT/<model>.xnnpack.pte and OUT/<model>.inputs.pt;
OUT/<model>.xnnpack-<scheme>.pte for the quantized variants of models.QUANTIZED;
and OUT/gpu/<model>.pte.xz, the compressed copies that travel to the GPU machine.
Files that exist are kept (delete them to export again). `--real` adds the
realistic sizes (models.REAL_SET), which take several minutes each.
"""

from __future__ import annotations

import argparse
import lzma
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from models import CPU_SET, DYNAMIC, GPU_SET, QUANTIZED, REAL_SET, SAME_PROGRAM, SET  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


class _Holder(torch.nn.Module):
    # A converted PT2E graph module returns None from eval(); the exporter expects the module back.
    def __init__(self, inner: torch.nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, *args):
        return self.inner(*args)


def _pt2e(module: torch.nn.Module, inputs: tuple, dynamic, scheme: str) -> torch.nn.Module:
    """Quantized by ExecuTorch's XNNPACK quantizer: static int8 (calibrated on the inputs) or dynamic int8."""
    from executorch.backends.xnnpack.quantizer import xnnpack_quantizer
    from torchao.quantization.pt2e import allow_exported_model_train_eval
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    config = xnnpack_quantizer.get_symmetric_quantization_config(is_per_channel=True,
                                                                 is_dynamic=scheme == "int8-dynamic")
    quantizer = xnnpack_quantizer.XNNPACKQuantizer().set_global(config)
    prepared = prepare_pt2e(torch.export.export(module, inputs, dynamic_shapes=dynamic).module(), quantizer)
    with torch.no_grad():  # a KV cache is written in place while calibrating
        prepared(*inputs)
    converted = convert_pt2e(prepared)
    allow_exported_model_train_eval(converted)
    return _Holder(converted)


def _8da4w(module: torch.nn.Module) -> torch.nn.Module:
    """8-bit dynamic activations, 4-bit weights in groups of 32, as ExecuTorch's Llama export quantizes linears."""
    from torchao.quantization import quantize_
    from torchao.quantization.granularity import PerGroup
    from torchao.quantization.quant_api import Int8DynamicActivationIntxWeightConfig

    quantize_(module, Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(32)))
    return module


def _write(program_buffer: bytes, path: Path) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_bytes(program_buffer)
    os.replace(tmp, path)


def export(name: str, out: Path) -> None:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower
    from executorch.exir.passes import MemoryPlanningPass

    if name in SAME_PROGRAM:
        _, inputs = SET[name]()
        torch.save(list(inputs), out / f"{name}.inputs.pt")
        for source in out.glob(f"{SAME_PROGRAM[name]}.*pte"):
            link = out / source.name.replace(SAME_PROGRAM[name], name, 1)
            if not link.exists():
                link.symlink_to(source.name)
        return
    # The SwiGLU benchmark's weights are inputs; planning memory for them would copy 270 MB per call.
    config = ExecutorchBackendConfig(memory_planning_pass=MemoryPlanningPass(alloc_graph_input=False)) \
        if name == "swiglu_bf16" else ExecutorchBackendConfig()
    dynamic = DYNAMIC[name]() if name in DYNAMIC else None
    variants = {"": None}
    if name in CPU_SET or name in REAL_SET:
        variants[".xnnpack"] = "float"
        for scheme in QUANTIZED.get(name, ()):
            variants[f".xnnpack-{scheme}"] = scheme
    for suffix, scheme in variants.items():
        path = out / f"{name}{suffix}.pte"
        if path.exists():
            continue
        started = time.perf_counter()
        module, inputs = SET[name]()
        if scheme in ("int8", "int8-dynamic"):
            module = _pt2e(module, inputs, dynamic, scheme)
        elif scheme == "8da4w":
            module = _8da4w(module)
        with torch.no_grad():
            # A holder's forward takes *args: its dynamic shapes are one entry, the tuple for those.
            shapes = (dynamic,) if dynamic is not None and isinstance(module, _Holder) else dynamic
            exported = torch.export.export(module, inputs, dynamic_shapes=shapes)
        partitioners = [XnnpackPartitioner()] if scheme else None
        program = to_edge_transform_and_lower(exported, partitioner=partitioners).to_executorch(config)
        _write(program.buffer, path)
        if not suffix and name != "swiglu_bf16":
            torch.save(list(inputs), out / f"{name}.inputs.pt")
        seconds = time.perf_counter() - started
        print(f"{path.name}: {path.stat().st_size / 2**20:.1f} MiB in {seconds:.0f} s", flush=True)
    if name in GPU_SET and not (out / "gpu" / f"{name}.pte.xz").exists():
        (out / "gpu").mkdir(exist_ok=True)
        data = (out / f"{name}.pte").read_bytes()
        (out / "gpu" / f"{name}.pte.xz").write_bytes(lzma.compress(data, preset=6))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=ROOT / ".cache" / "bench")
    parser.add_argument("--models", default=None)
    parser.add_argument("--real", action="store_true", help="also the realistic sizes (models.REAL_SET)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    names = set(CPU_SET) | set(GPU_SET) | (set(REAL_SET) if args.real else set())
    if args.models:
        names = set(args.models.split(","))
    # Aliases last: they link to the files their program's entry wrote.
    for name in sorted(names, key=lambda n: (n in SAME_PROGRAM, n)):
        export(name, args.out)


if __name__ == "__main__":
    main()
