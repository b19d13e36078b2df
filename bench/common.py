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
        out_json.write_text(json.dumps({"title": title, "results": results, "median_ratios": summary}, indent=1))
    return summary


def environment() -> str:
    import platform

    return (f"python {platform.python_version()}, torch {torch.__version__}, "
            f"{torch.get_num_threads()} intra-op threads, {platform.processor() or platform.machine()}")
