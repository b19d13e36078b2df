"""Exports the benchmark set (bench/models.py) with ExecuTorch: portable and XNNPACK-lowered programs.

    python bench/export.py [OUT=.cache/bench]

Writes OUT/<model>.pte, OUT/<model>.xnnpack.pte and OUT/<model>.inputs.pt, and
OUT/gpu/<model>.pte.xz, the compressed copies that travel to the GPU machine.
"""

from __future__ import annotations

import lzma
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from models import CPU_SET, GPU_SET, SET  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def export(name: str, out: Path) -> None:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import ExecutorchBackendConfig, to_edge_transform_and_lower
    from executorch.exir.passes import MemoryPlanningPass

    module, inputs = SET[name]()
    # The SwiGLU benchmark's weights are inputs; planning memory for them would copy 270 MB per call.
    config = ExecutorchBackendConfig(memory_planning_pass=MemoryPlanningPass(alloc_graph_input=False)) \
        if name == "swiglu_bf16" else ExecutorchBackendConfig()
    with torch.no_grad():
        exported = torch.export.export(module, inputs)
    variants = {"": []}
    if name in CPU_SET:
        variants[".xnnpack"] = [XnnpackPartitioner()]
    for suffix, partitioners in variants.items():
        program = to_edge_transform_and_lower(exported, partitioner=partitioners or None).to_executorch(config)
        (out / f"{name}{suffix}.pte").write_bytes(program.buffer)
    if name != "swiglu_bf16":
        torch.save(list(inputs), out / f"{name}.inputs.pt")
    if name in GPU_SET:
        (out / "gpu").mkdir(exist_ok=True)
        data = (out / f"{name}.pte").read_bytes()
        (out / "gpu" / f"{name}.pte.xz").write_bytes(lzma.compress(data, preset=6))
    print(f"{name}: {(out / f'{name}.pte').stat().st_size / 2**20:.1f} MiB")


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / ".cache" / "bench"
    out.mkdir(parents=True, exist_ok=True)
    for name in sorted(set(CPU_SET) | set(GPU_SET)):
        export(name, out)


if __name__ == "__main__":
    main()
