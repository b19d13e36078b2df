"""The one-row kernels alone: achieved bandwidth inside CUDA graphs, against cuBLAS on the same shapes.

    python bench/gemv.py                 # the SwiGLU benchmark's shapes: the tilings gemv.tiling() picks, the
                                         # fused gate/up kernel, the whole MLP
    python bench/gemv.py --shapes 1b     # a 1B Llama decoder's products (bench/llm_gpu.py's "1b")
    python bench/gemv.py --search        # every tiling of a grid, best first

Each timing replays a captured graph of launches over weight sets in
rotation, at least 8 and enough sets for 200 MB (so the L2 cannot hold the
one being read, as in a decode step, where every product reads new weights),
median of 30 replays, CUDA events. Every result is checked against a float64
reference after a replay of the graph, with outputs poisoned before it.
"""

from __future__ import annotations

import argparse
import itertools
import math
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import copy_bandwidth  # noqa: E402

try:  # Triton exists where a GPU does; --help works without it
    from pterun.kernels.triton.gated import gate_up
    from pterun.kernels.triton.gemv import Tiling, gemv, tiling
except ImportError:
    gate_up = gemv = tiling = Tiling = None  # type: ignore[assignment,misc]

PER_GRAPH, ROTATION_BYTES = 8, 200e6
SHAPE_SETS = {
    "swiglu": {"gemv 11008x4096": (11008, 4096), "gemv 4096x11008": (4096, 11008),
               "gate+up 2x11008x4096": (11008, 4096)},
    # Llama-3.2-1B's layers: q and o, k and v (8 of 32 heads), gate and up, down; the 32000-token head.
    "1b": {"gemv 2048x2048": (2048, 2048), "gemv 512x2048": (512, 2048), "gate+up 2x8192x2048": (8192, 2048),
           "gemv 2048x8192": (2048, 8192), "gemv 32000x2048": (32000, 2048)},
}


def graph_ms(launches: list, per_graph: int = PER_GRAPH, replays: int = 30) -> float:
    """Median ms per launch of a graph that runs ``launches`` in rotation (each at least once)."""
    per_graph = max(per_graph, len(launches))
    for launch in launches:
        launch()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(per_graph):
            launches[i % len(launches)]()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(replays + 3):
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / per_graph)
    times = sorted(times[3:])
    return times[len(times) // 2]


class Case:
    """One kernel at one shape: weight sets, inputs, outputs, a float64 reference, and its launches."""

    def __init__(self, label: str, seed: int = 0) -> None:
        n, k = ALL_SHAPES[label]
        g = torch.Generator(device="cuda").manual_seed(seed)
        self.fused = label.startswith("gate")
        count = 2 if self.fused else 1
        self.nbytes = count * n * k * 2
        sets = max(4, math.ceil(ROTATION_BYTES / self.nbytes))
        self.weights = [[(torch.randn(n, k, device="cuda", generator=g) * 0.02).to(torch.bfloat16)
                         for _ in range(count)] for _ in range(sets)]
        self.x = torch.randn(k, device="cuda", generator=g).to(torch.bfloat16)
        self.outs = [torch.empty(n, device="cuda", dtype=torch.bfloat16) for _ in range(sets)]

    def launches(self, tile: Tiling | None) -> list:
        if self.fused:
            return [lambda w=w, o=o: gate_up(w[0], w[1], self.x, o, tile) for w, o in zip(self.weights, self.outs)]
        return [lambda w=w, o=o: gemv(w[0], self.x, o, tile) for w, o in zip(self.weights, self.outs)]

    def cublas_ms(self) -> float:
        """The same products as torch.mm of the one row against the transposed weights (what Inductor calls)."""
        x = self.x[None]
        return graph_ms([lambda w=w, o=o: [torch.mm(x, m.t(), out=o[None]) for m in w]
                         for w, o in zip(self.weights, self.outs)])

    def error(self) -> float:
        worst = 0.0
        for w, o in zip(self.weights, self.outs):
            products = [(m.double() @ self.x.double()) for m in w]
            ref = products[0] if not self.fused else torch.nn.functional.silu(products[0]) * products[1]
            if torch.isnan(o).any():
                return float("nan")
            worst = max(worst, ((o.double() - ref).norm() / ref.norm()).item())
        return worst

    def measure(self, tile: Tiling | None) -> tuple[float, float]:
        launches = self.launches(tile)
        ms = graph_ms(launches)
        for o in self.outs:
            o.fill_(float("nan"))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for launch in launches:
                launch()
        graph.replay()
        torch.cuda.synchronize()
        return ms, self.error()


def grid() -> list[Tiling]:
    tiles = []
    for rows, cols in itertools.product((1, 2, 4, 8, 16), (256, 512, 1024, 2048, 4096)):
        if 1024 <= rows * cols <= 16384:
            tiles += [Tiling(rows, cols, w, 1) for w in ((2, 4, 8) if rows * cols <= 2048 else (4, 8))]
    return tiles


def _compile(job) -> None:
    label, tile = job
    Case(label).launches(tile)[0]()
    torch.cuda.synchronize()


ALL_SHAPES = {label: shape for shapes in SHAPE_SETS.values() for label, shape in shapes.items()}


def search(bandwidth: float, shapes: dict) -> None:
    tiles = grid()
    jobs = [(label, t) for label in shapes for t in tiles]
    # Compile in parallel processes (Triton's disk cache), time here one at a time.
    context = torch.multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(min(16, os.cpu_count() or 1), mp_context=context) as pool:
        list(pool.map(_compile, jobs))
    for label in shapes:
        case = Case(label)
        rows = []
        for t in tiles:
            ms, err = case.measure(t)
            rows.append((ms, t, err))
        for t in sorted(rows)[:5]:
            best = t[1]
            for stages in (2, 3):
                s = best._replace(stages=stages)
                ms, err = case.measure(s)
                rows.append((ms, s, err))
        rows.sort()
        print(f"\n{label}: {case.nbytes / 1e6:.1f} MB")
        for ms, t, err in rows[:12]:
            print(f"  {tuple(t)}  {ms * 1e3:6.1f} µs  {case.nbytes / (ms / 1e3) / 1e12:.2f} TB/s "
                  f"= {case.nbytes / (ms / 1e3) / bandwidth:.0%} of copy  err {err:.1e}")


def whole_mlp(bandwidth: float) -> None:
    """down(silu(gate x) * up x): the fused gate/up kernel and one gemv, against the exported chain."""
    g = torch.Generator(device="cuda").manual_seed(1)
    sets = [[(torch.randn(*s, device="cuda", generator=g) * 0.02).to(torch.bfloat16)
             for s in ((11008, 4096), (11008, 4096), (4096, 11008))] for _ in range(2)]
    x = torch.randn(4096, device="cuda", generator=g).to(torch.bfloat16)
    h = torch.empty(11008, device="cuda", dtype=torch.bfloat16)
    a, b, y = torch.empty_like(h), torch.empty_like(h), torch.empty(4096, device="cuda", dtype=torch.bfloat16)

    def fused(w):
        gate_up(w[0], w[1], x, h)
        gemv(w[2], h, y)

    def chain(w):
        gemv(w[0], x, a)
        gemv(w[1], x, b)
        a32 = a.float()
        gemv(w[2], ((a32 * torch.sigmoid(a32)).to(torch.bfloat16) * b), y)

    nbytes = sum(w.numel() * 2 for w in sets[0])
    floor = nbytes / bandwidth
    for label, fn in (("fused gate/up + gemv", fused), ("3 gemv + elementwise chain", chain)):
        ms = graph_ms([lambda w=w, fn=fn: fn(w) for w in sets])
        print(f"whole MLP, {label}: {ms * 1e3:.1f} µs = {floor / (ms / 1e3):.0%} of the floor "
              f"({floor * 1e6:.1f} µs)")
    fused(sets[0])
    out_fused = y.clone()
    chain(sets[0])
    print(f"fused vs chain: max |diff| {(out_fused.float() - y.float()).abs().max().item():.3g}, "
          f"bit-equal {torch.equal(out_fused, y)}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--search", action="store_true")
    parser.add_argument("--shapes", choices=sorted(SHAPE_SETS), default="swiglu")
    args = parser.parse_args()
    if gemv is None:
        raise SystemExit("bench/gemv.py times pterun's Triton kernels: it needs Triton and a CUDA device")
    bandwidth = copy_bandwidth()
    print(f"device-to-device copy: {bandwidth / 1e12:.2f} TB/s")
    shapes = SHAPE_SETS[args.shapes]
    if args.search:
        search(bandwidth, shapes)
    for label, (n, k) in shapes.items():
        case = Case(label)
        ms, err = case.measure(None)
        cublas = case.cublas_ms()
        print(f"{label} {tuple(tiling(n, k))}: {ms * 1e3:.1f} µs, {case.nbytes / (ms / 1e3) / 1e12:.2f} TB/s = "
              f"{case.nbytes / (ms / 1e3) / bandwidth:.0%} of copy bandwidth, err {err:.1e}; "
              f"cuBLAS {cublas * 1e3:.1f} µs = {case.nbytes / (cublas / 1e3) / bandwidth:.0%}")
    if args.shapes != "swiglu":
        return
    w = torch.randn(11008, 4096, device="cuda").to(torch.bfloat16)
    x = torch.randn(4096, device="cuda").to(torch.bfloat16)
    ms = graph_ms([lambda: torch.mv(w, x)])
    print(f"torch.mv 11008x4096 (one weight set): {ms * 1e3:.1f} µs")
    whole_mlp(bandwidth)


if __name__ == "__main__":
    main()
