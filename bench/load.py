"""Load time and memory: load_program + load_method against ExecuTorch's, and the peak RSS against its.

Every program of the set is timed as exported for the portable kernels (``X.pte``) and, where exported,
lowered to XNNPACK (``X.xnnpack.pte``); pterun warm (its load cache filled) and cold (no cache), each
in wall-clock and CPU time, interleaved with ExecuTorch's load round by round.

    python bench/export.py && python bench/load.py [--models a,b]
"""

from __future__ import annotations

import argparse
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

# Memory, in a fresh process per way: resident bytes before the load, then the peak (the kernel's high-water
# mark, reset just before the load) and what stays resident after the load and after a first call. Both
# runtimes import torch first, so the baseline holds the same libraries.
RSS_PROBE = """
import gc, sys, torch
way, pte, inputs = sys.argv[1:4]
args = torch.load(inputs)
if way == 'executorch':
    from executorch.extension.pybindings import portable_lib
    import executorch.kernels.quantized  # noqa: F401 - the quantized operators, as bench/common loads them
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401
else:
    import pterun
def status():
    fields = dict(line.split(':', 1) for line in open('/proc/self/status'))
    return {k: int(fields[k].split()[0]) * 1024 for k in ('VmRSS', 'VmHWM')}
gc.collect()
open('/proc/self/clear_refs', 'w').write('5')  # resets VmHWM to the present RSS
before = status()['VmRSS']
if way == 'executorch':
    module = portable_lib._load_for_executorch(pte)
    run = lambda: module.forward(tuple(args))
else:
    method = pterun.Runtime.get().load_program(pte).load_method('forward')
    run = lambda: method.execute(list(args))
loaded = status()
run()
called = status()
print(before, loaded['VmHWM'], loaded['VmRSS'], called['VmHWM'], called['VmRSS'])
"""


def _memory(way: str, pte: Path, inputs: Path) -> dict[str, float]:
    """MB: the process's RSS before the load ("base"), its peak up to the end of the load and of a first call,
    and its RSS after each (a fresh process; see RSS_PROBE)."""
    done = subprocess.run([sys.executable, "-c", RSS_PROBE, way, str(pte), str(inputs)], capture_output=True,
                          text=True, check=True)
    base, load_peak, load_rss, call_peak, call_rss = (int(v) / 2**20 for v in done.stdout.split()[-5:])
    return {"base": base, "load peak": load_peak, "load rss": load_rss, "call peak": call_peak,
            "call rss": call_rss}


def _timed(fn) -> tuple[float, float]:
    """Wall-clock and CPU seconds (every thread of the process) of one call. No collection before it: a load
    that makes the objects that bring on Python's full collection pays for it, as a user's load would."""
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
    console.print(f"{'program':22s} {'file MB':>7s} {'ET ms':>7s} {'warm ms':>8s} {'ratio':>6s} {'mean':>6s} "
                  f"{'cold ms':>8s} {'ratio':>6s} {'ET cpu':>7s} {'warm cpu':>8s} {'ratio':>6s} {'cold cpu':>8s} "
                  f"{'ratio':>6s} {'ET peak':>7s} {'peak':>7s} {'ratio':>6s} {'ET RSS':>7s} {'RSS':>7s}")
    console.print("(times: medians of load_program + load_method, and the warm loads' mean; peak: the process's "
                  "peak RSS in MB up to the end "
                  "of the first call, RSS: resident after it, each in a fresh process that imported torch)")
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
        inputs = pte.with_name(f"{name.split('.')[0]}.inputs.pt")
        memory = {way: _memory(way, pte, inputs) for way in ("executorch", "pterun")} if inputs.exists() else None
        wall = {way: statistics.median(w for w, _ in t) * 1e3 for way, t in times.items()}
        cpu = {way: statistics.median(c for _, c in t) * 1e3 for way, t in times.items()}
        et, et_cpu = wall["executorch"], cpu["executorch"]
        warm_mean = statistics.mean(w for w, _ in times["warm"]) * 1e3
        console.print(f"{name:22s} {pte.stat().st_size / 2**20:7.1f} {et:7.1f} {wall['warm']:8.1f} "
                      f"{wall['warm'] / et:6.1f} {warm_mean:6.1f} {wall['cold']:8.1f} {wall['cold'] / et:6.1f} "
                      f"{et_cpu:7.1f} "
                      f"{cpu['warm']:8.1f} {cpu['warm'] / et_cpu:6.1f} {cpu['cold']:8.1f} {cpu['cold'] / et_cpu:6.1f} "
                      + (f"{memory['executorch']['call peak']:7.0f} {memory['pterun']['call peak']:7.0f} "
                         f"{memory['pterun']['call peak'] / memory['executorch']['call peak']:6.2f} "
                         f"{memory['executorch']['call rss']:7.0f} {memory['pterun']['call rss']:7.0f}"
                         if memory else "  (no inputs file: memory not measured)"))
    cache.cleanup()


if __name__ == "__main__":
    main()
