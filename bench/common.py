"""What the benchmark scripts share: loading the exported set, reporting tables."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from pterun.cli.timing import Timing

ROOT = Path(__file__).resolve().parent.parent
console = Console(width=140)


def report(title: str, rows: dict[str, list[Timing]], base: str, against: list[str], out_json: Path | None) -> dict:
    """One row per model: median per way, and base's time over each other way's (below 1: base is faster)."""
    table = Table(title=title)
    if not rows:
        console.print(f"{title}: no results")
        return {}
    ways = list(dict.fromkeys(t.name for timings in rows.values() for t in timings))  # every way, first seen first
    table.add_column("model")
    for way in ways:
        table.add_column(f"{way} ms", justify="right")
    for other in against:
        table.add_column(f"{base} / {other}", justify="right")
    ratios: dict[str, list[float]] = {other: [] for other in against}
    results = {}
    for model, timings in rows.items():
        by = {t.name: t for t in timings}
        cells = [f"{by[w].median:.3f}" if w in by else "—" for w in ways]
        for other in against:
            if other in by and base in by:
                r = by[base].median / by[other].median
                ratios[other].append(r)
                cells.append(f"{r:.2f}×")
            else:
                cells.append("—")
        table.add_row(model, *cells)
        results[model] = [t.as_dict() for t in timings]
    summary = {other: statistics.median(v) for other, v in ratios.items() if v}
    table.add_row("median", *([""] * len(ways)), *(f"{summary.get(o, float('nan')):.2f}×" for o in against))
    console.print(table)
    if out_json:
        out_json.write_text(json.dumps({"title": title, "environment": environment(), "results": results,
                                        "median_ratios": summary}, indent=1))
    return summary


def environment() -> str:
    """The software and the CPU a figure comes from: instruction sets, and the ceilings the process runs under
    (speed and, for quantized programs, the products pterun takes depend on them)."""
    import os
    import platform

    from pterun.backends.xnnpack.nodes import isa

    found = isa.features()
    sets = [n for n in ("amx_int8", "avx512_vnni", "avx_vnni", "avx512_f", "avx2") if n in found]
    ceilings = [f"{k}={os.environ[k]}" for k in ("ONEDNN_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY") if k in os.environ]
    cpu = isa.cpu()
    products = "integer" if cpu.integer_products else "float"
    return (f"python {platform.python_version()}, torch {torch.__version__}, "
            f"{torch.get_num_threads()} intra-op threads, {platform.processor() or platform.machine()} "
            f"({', '.join(sets) or 'no AVX2'}; ATen {torch.backends.cpu.get_cpu_capability()}"
            f"{'; ' + ', '.join(ceilings) if ceilings else ''}; 8-bit products: {products}, "
            f"8da4w: XNNPACK's {cpu.block_kernels} order)")


def copy_bandwidth() -> float:
    """Bytes per second a large device-to-device copy moves (read plus write), the median of 20: the bandwidth
    floors of the GPU benches divide the bytes a step must read by it."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(20):
        start.record()
        dst.copy_(src)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    times.sort()
    return 2 * src.numel() / times[len(times) // 2]
