"""The execute loop's own cost per instruction, on a long chain of tiny ops.

    python bench/loop.py [--ops 400]

A program of N alternating adds and multiplies on an 8-element tensor is run by
pterun, and the same N out-variant calls are made from a bare Python loop over
pre-built argument tuples (the floor for calling PyTorch's kernels from
Python). Also timed: ExecuTorch's runtime on the same program. Per-instruction
figures are the call's median over N.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, console, environment  # noqa: E402

import pterun  # noqa: E402
from pterun.cli.timing import Way, measure  # noqa: E402


class Chain(torch.nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.n = n

    def forward(self, x):
        for i in range(self.n):
            x = x + 1.0 if i % 2 == 0 else x * 0.5
        return x


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ops", type=int, default=400)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    from executorch.exir import to_edge
    from executorch.extension.pybindings import portable_lib

    x = torch.randn(8)
    path = ROOT / ".cache" / "bench" / f"chain{args.ops}.pte"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(to_edge(torch.export.export(Chain(args.ops), (x,))).to_executorch().buffer)
    method = pterun.Runtime.get().load_program(path).load_method("forward")
    et = portable_lib._load_for_executorch(str(path))

    # The bare loop: the same kernels, out-variants into preallocated tensors, one Python call each.
    add, mul = torch.ops.aten.add.out._op, torch.ops.aten.mul.out._op
    buffers = [torch.empty(8) for _ in range(args.ops + 1)]
    steps = [(add if i % 2 == 0 else mul, (buffers[i], 1.0 if i % 2 == 0 else 0.5), buffers[i + 1])
             for i in range(args.ops)]

    def bare():
        buffers[0].copy_(x)
        with torch.inference_mode():
            for fn, a, out in steps:
                fn(*a, out=out)
        return buffers[-1]

    plan = method.plan
    console.print(environment(), f"{len(plan.instructions)} instructions in the program")
    timings = measure([
        Way("pterun", lambda: method.execute([x], clone_outputs=False)),
        Way("bare python loop", bare),
        Way("executorch", lambda: et.forward([x], clone_outputs=False)),
    ], warmup=20, repeat=args.repeat)
    base = timings[0].median
    for t in timings:
        console.print(f"{t.name:18s} {t.median * 1e3 / args.ops:6.2f} µs per instruction "
                      f"(pterun / this = {base / t.median:.2f}×)")


if __name__ == "__main__":
    main()
