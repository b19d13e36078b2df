"""A busy machine: the same programs timed quiet and while two background processes spin on the cores.

    python bench/busy.py [--repeat 200] [--mid-repeat 20] [--models softmax,...,tiny_mlp,example_llama]
        [--json out.json]

Ways: pterun with its default thread choice, with ``num_threads=1`` and ``num_threads=2``, and
ExecuTorch's portable runtime (single-threaded). Quiet and busy phases alternate ``--phases`` times;
within a phase the single-threaded ways are timed interleaved, and ``num_threads=2`` after them
(OpenMP's worker keeps spinning after a region and would slow the next way). The slowdown of a way is its busy
median over its
quiet median; the last column divides pterun's (default) slowdown by ExecuTorch's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, console, environment  # noqa: E402
from rich.table import Table  # noqa: E402
from tiny_models import TINY, export_tiny  # noqa: E402

import pterun  # noqa: E402
from pterun.cli.timing import Way, measure  # noqa: E402

MID = ("tiny_mlp", "example_llama")
SPIN = "while True: pass"


def ways_for(name: str, directory: Path) -> tuple[list[Way], int]:
    from executorch.extension.pybindings import portable_lib

    pte = directory / f"{name}.pte"
    inputs = torch.load(directory / f"{name}.inputs.pt")
    runtime = pterun.Runtime.get()
    methods = {label: runtime.load_program(pte, num_threads=n).load_method("forward")
               for label, n in (("pterun", None), ("pterun-1", 1), ("pterun-2", 2))}
    et = portable_lib._load_for_executorch(str(pte))
    ways = [Way(label, lambda m=m: m.execute(inputs, clone_outputs=False)) for label, m in methods.items()]
    ways.append(Way("executorch", lambda: et.forward(inputs, clone_outputs=False)))
    return ways, methods["pterun"].num_threads


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--mid-repeat", type=int, default=20, help="rounds for the mid-size programs")
    parser.add_argument("--phases", type=int, default=2)
    parser.add_argument("--models", default=",".join((*TINY, *MID)))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    bench = ROOT / ".cache" / "bench"
    names = args.models.split(",")
    export_tiny(bench / "tiny", [n for n in names if n in TINY])
    console.print(environment(), "(the process's default; pterun's default chooses per program)")
    samples: dict[str, dict[str, dict[str, list[float]]]] = {}
    chosen = {}
    for name in names:
        ways, chosen[name] = ways_for(name, bench / "tiny" if name in TINY else bench)
        per = samples[name] = {"quiet": {}, "busy": {}}
        for _ in range(args.phases):
            for phase in ("quiet", "busy"):
                spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(2 if phase == "busy" else 0)]
                time.sleep(1.0)  # the machine settles into the phase (a load appears within a second, not at once)
                try:
                    repeat = args.repeat if name in TINY else args.mid_repeat
                    # Two-thread calls leave OpenMP's worker spinning for a while after each region, which
                    # would slow whatever runs next: they are timed apart from the single-threaded ways.
                    for group in ([w for w in ways if w.name != "pterun-2"], [w for w in ways if w.name == "pterun-2"]):
                        for t in measure(group, warmup=3, repeat=repeat):
                            per[phase].setdefault(t.name, []).extend(t.samples)
                finally:
                    for p in spinners:
                        p.kill()
                        p.wait()
    table = Table(title="busy machine: median ms quiet -> busy (slowdown)")
    table.add_column("program")
    table.add_column("threads")
    ways = list(next(iter(samples.values()))["quiet"])
    for way in ways:
        table.add_column(way, justify="right")
    table.add_column("pterun / executorch slowdown", justify="right")
    results = {}
    for name, per in samples.items():
        cells, slow = [], {}
        for way in ways:
            quiet, busy = statistics.median(per["quiet"][way]), statistics.median(per["busy"][way])
            slow[way] = busy / quiet
            cells.append(f"{quiet:.3f} -> {busy:.3f} ({slow[way]:.1f}×)")
        table.add_row(name, str(chosen[name]), *cells, f"{slow['pterun'] / slow['executorch']:.2f}")
        results[name] = {way: {"quiet_ms": statistics.median(per["quiet"][way]),
                               "busy_ms": statistics.median(per["busy"][way]), "slowdown": slow[way]}
                         for way in ways}
    console.print(table)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
