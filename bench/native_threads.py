"""The native 4-bit kernels at 1 and 2 threads, alone and just after a PyTorch operator.

    python bench/native_threads.py [--repeat 200]

Three 4-bit block layers of a 1B-parameter Llama's shapes (2048 -> 8192, 8192 -> 2048, 2048 -> 2048; blocks
of 32) at one row, as a decode step calls them, packed and run through the extension directly. "between"
runs a 65,536-element PyTorch multiply before each layer, as a decode step's PyTorch operators come
between its layers: PyTorch's OpenMP threads spin after each operator, which is what a pool of the
kernels' own could not get past on a machine with as many cores as threads (docs/threads.md). Medians of
``--repeat`` steps, the ways interleaved twice; the figures name the kernels' instruction set and whether
they run on PyTorch's OpenMP team.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

import torch

SHAPES = ((8192, 2048), (2048, 8192), (2048, 2048))  # (outputs, inputs)
BLOCK = 32


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    from pterun.backends.xnnpack.nodes import native
    from pterun.native import _kernels

    isa = native.kernel_isa()
    isa_number, family = native.ISAS[isa], native.FAMILIES["avx512vnni" if isa == "avx512vnni" else "avx2"]
    g = torch.Generator().manual_seed(0)
    keep, layers = [], []
    for n, k in SHAPES:
        weights = torch.randint(0, 256, (n * k // 2,), dtype=torch.uint8, generator=g)
        scales = (torch.rand(n, k // BLOCK, generator=g) / 64).bfloat16().float()  # bf16-exact, as exported
        start = torch.zeros(n)
        keep.append((weights, scales, start))
        layers.append(_kernels.qb4w_pack(isa_number, family, n, k, BLOCK, weights.data_ptr(), scales.data_ptr(),
                                         start.data_ptr(), 0, -math.inf, math.inf))
    rows = {k: torch.randint(-128, 128, (1, k), dtype=torch.int8, generator=g) for _, k in SHAPES}
    outs = {n: torch.empty(1, n) for n, _ in SHAPES}
    zero_point, scale = torch.zeros(1), torch.full((1,), 0.01)
    big, into = torch.randn(1 << 16), torch.empty(1 << 16)

    def step(threads: int, between: bool) -> None:
        for layer, (n, k) in zip(layers, SHAPES):
            if between:
                torch.mul(big, 1.5, out=into)
            _kernels.qb4w_run(layer, 1, rows[k].data_ptr(), k, zero_point.data_ptr(), scale.data_ptr(),
                              outs[n].data_ptr(), n, threads)

    team = "PyTorch's OpenMP team" if _kernels.parallel_team() else "the kernels' own workers"
    print(f"kernels {isa}, on {team}; torch {torch.__version__}, {torch.get_num_threads()} intra-op threads")
    figures: dict[tuple[bool, int], list[float]] = {}
    for _ in range(2):
        for between in (False, True):
            for threads in (1, 2):
                for _ in range(20):
                    step(threads, between)
                times = []
                for _ in range(args.repeat):
                    start_time = time.perf_counter()
                    step(threads, between)
                    times.append(time.perf_counter() - start_time)
                figures.setdefault((between, threads), []).append(statistics.median(times) * 1e3)
    print("| PyTorch operator between layers | threads | ms per step (two medians) |\n|---|---:|---|")
    for (between, threads), values in figures.items():
        print(f"| {'yes' if between else 'no'} | {threads} | {', '.join(f'{v:.2f}' for v in values)} |")


if __name__ == "__main__":
    main()
