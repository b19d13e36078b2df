"""Load time and memory: load_program + load_method against ExecuTorch's, and RSS growth after load.

Every program of the set is timed as exported for the portable kernels (``X.pte``) and, where exported,
lowered to XNNPACK (``X.xnnpack.pte``).

    python bench/export.py && python bench/load.py [--models a,b]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, console, environment  # noqa: E402
from models import CPU_SET  # noqa: E402

RSS_PROBE = """
import gc, sys, pterun, torch
def rss():
    return int(open('/proc/self/statm').read().split()[1]) * 4096
torch.randn(4) + 1  # torch's own start-up allocations, before the first reading
gc.collect(); before = rss()
m = pterun.Runtime.get().load_program(sys.argv[1]).load_method('forward')
gc.collect(); after = rss()
meta = m.metadata
arenas = sum(meta.memory_planned_buffer_size(i) for i in range(meta.num_memory_planned_buffers()))
print(after - before, arenas)
"""


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", type=Path, default=ROOT / ".cache" / "bench")
    parser.add_argument("--models", default=",".join(CPU_SET))
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    import pterun
    from executorch.extension.pybindings import portable_lib

    console.print(environment())
    console.print(f"{'program':22s} {'file MB':>8s} {'pterun ms':>10s} {'executorch ms':>14s} {'ratio':>6s} "
                  f"{'RSS growth MB':>14s} {'arenas MB':>10s}")
    programs = [args.dir / f"{name}{variant}.pte" for name in args.models.split(",") for variant in ("", ".xnnpack")]
    for pte in programs:
        if not pte.exists():
            continue
        name = pte.name.removesuffix(".pte")
        ours, theirs = [], []
        for _ in range(args.repeat):
            gc.collect()
            t0 = time.perf_counter()
            pterun.Runtime.get().load_program(pte).load_method("forward")
            ours.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            portable_lib._load_program(str(pte), program_verification=portable_lib.Verification.InternalConsistency)\
                .load_method("forward")
            theirs.append(time.perf_counter() - t0)
        probe = subprocess.run([sys.executable, "-c", RSS_PROBE, str(pte)], capture_output=True, text=True, check=True)
        growth, arenas = (int(v) for v in probe.stdout.split())
        a, b = statistics.median(ours) * 1e3, statistics.median(theirs) * 1e3
        console.print(f"{name:22s} {pte.stat().st_size / 2**20:8.1f} {a:10.1f} {b:14.1f} {a / b:6.1f} "
                      f"{growth / 2**20:14.1f} {arenas / 2**20:10.1f}")


if __name__ == "__main__":
    main()
