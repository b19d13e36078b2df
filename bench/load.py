"""Load time and memory: load_program + load_method against ExecuTorch's, and RSS growth after load.

Every program of the set is timed as exported for the portable kernels (``X.pte``) and, where exported,
lowered to XNNPACK (``X.xnnpack.pte``); pterun warm (its load cache filled) and cold (no cache), each
in wall-clock and CPU time, interleaved with ExecuTorch's load round by round.

    python bench/export.py && python bench/load.py [--models a,b]
"""

from __future__ import annotations

import argparse
import gc
import inspect
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, console, environment  # noqa: E402
from models import CPU_SET, QUANTIZED, REAL_SET, SAME_PROGRAM  # noqa: E402

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


def _timed(fn) -> tuple[float, float]:
    """Wall-clock and CPU seconds (every thread of the process) of one call."""
    gc.collect()
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", type=Path, default=ROOT / ".cache" / "bench")
    parser.add_argument("--models", default=",".join(dict.fromkeys(
        n for n in (*CPU_SET, *REAL_SET) if n not in SAME_PROGRAM)), help="those exported are timed")
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    from executorch.extension.pybindings import portable_lib

    import pterun

    console.print(environment())
    # Warm: the load cache (docs/cache.md) in a directory of this run's, filled by the first round. Cold:
    # no cache. CPU time counts every thread of the process, so a load that is preempted on a busy
    # machine is not charged for the time it waited.
    cache = tempfile.TemporaryDirectory(prefix="pterun-load-bench-")
    has_cache = "cache_dir" in inspect.signature(pterun.Runtime.load_program).parameters
    ways = {
        "executorch": lambda pte: portable_lib._load_program(
            str(pte), program_verification=portable_lib.Verification.InternalConsistency).load_method("forward"),
        "warm": lambda pte: pterun.Runtime.get().load_program(
            pte, **({"cache_dir": cache.name} if has_cache else {})).load_method("forward"),
        "cold": lambda pte: pterun.Runtime.get().load_program(
            pte, **({"cache_dir": False} if has_cache else {})).load_method("forward"),
    }
    console.print(f"{'program':22s} {'file MB':>7s} {'ET ms':>7s} {'warm ms':>8s} {'ratio':>6s} {'cold ms':>8s} "
                  f"{'ratio':>6s} {'ET cpu':>7s} {'warm cpu':>8s} {'ratio':>6s} {'cold cpu':>8s} {'ratio':>6s} "
                  f"{'RSS MB':>7s} {'arenas':>7s}")
    programs = [args.dir / f"{name}{variant}.pte" for name in args.models.split(",")
                for variant in ("", ".xnnpack", *(f".xnnpack-{s}" for s in QUANTIZED.get(name, ())))]
    for pte in programs:
        if not pte.exists():
            continue
        name = pte.name.removesuffix(".pte")
        ways["warm"](pte)  # fills the cache
        times: dict[str, list[tuple[float, float]]] = {way: [] for way in ways}
        for _ in range(args.repeat):
            for way, load in ways.items():
                times[way].append(_timed(lambda load=load, pte=pte: load(pte)))
        probe = subprocess.run([sys.executable, "-c", RSS_PROBE, str(pte)], capture_output=True, text=True, check=True)
        growth, arenas = (int(v) for v in probe.stdout.split())
        wall = {way: statistics.median(w for w, _ in t) * 1e3 for way, t in times.items()}
        cpu = {way: statistics.median(c for _, c in t) * 1e3 for way, t in times.items()}
        et, et_cpu = wall["executorch"], cpu["executorch"]
        console.print(f"{name:22s} {pte.stat().st_size / 2**20:7.1f} {et:7.1f} {wall['warm']:8.1f} "
                      f"{wall['warm'] / et:6.1f} {wall['cold']:8.1f} {wall['cold'] / et:6.1f} {et_cpu:7.1f} "
                      f"{cpu['warm']:8.1f} {cpu['warm'] / et_cpu:6.1f} {cpu['cold']:8.1f} {cpu['cold'] / et_cpu:6.1f} "
                      f"{growth / 2**20:7.1f} {arenas / 2**20:7.1f}")
    cache.cleanup()


if __name__ == "__main__":
    main()
