"""Rows/s of a program over a dataset with Ray Data (pterun.ray.PteRunner) against a loop in one process.

    python bench/batch.py [--rounds 3] [--vision .cache/bench/mobilenet_v2.pte] [--rows 160,320]
    python bench/batch.py --device cuda [--rounds 3]

CPU: a loop over the rows in this process (1 intra-op thread), Ray Data with one actor and with two
(each actor 1 CPU, so 1 thread); CUDA: a loop on the GPU against one GPU actor. The ways run
interleaved, once each per round, on one local Ray cluster; medians over the rounds. Each Ray job
starts its actors and loads the program in each, as a user's job does: "job" rows/s counts that.
"Start" is the time until every actor has begun its first batch (for the loop: the load), and
"steady" rows/s counts the rows begun after that over the time after that.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

# The loop runs as an actor does: Ray starts CPU actors with OMP_NUM_THREADS=1. (On a busy machine, a
# process whose OpenMP pool has two threads runs the bundled example 3x slower than one started with
# one, even with num_threads=1 per call.)
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, console, environment  # noqa: E402

from pterun import Runtime  # noqa: E402
from pterun.ray import PteRunner  # noqa: E402
from pterun.ray.sources import from_arrays  # noqa: E402


def rows_for(path: Path, n: int) -> dict[str, np.ndarray]:
    """``n`` random rows for the program's one input: images in [0, 1), or token ids below 1000."""
    meta = Runtime.get().load_program(path).metadata("forward")
    info = meta.input_tensor_meta(0)
    sizes = info.sizes()[1:]
    rng = np.random.default_rng(0)
    if info.dtype() == 4:  # Long: token ids
        return {"tokens": rng.integers(0, 1000, (n, *sizes), dtype=np.int64)}
    return {"image": rng.random((n, *sizes), dtype=np.float32)}


def loop(path: Path, columns: dict[str, np.ndarray], device: str) -> tuple[float, float, float]:
    """Every row through one method in this process: seconds in all, to the first row's call, and after it."""
    start = time.perf_counter()
    method = Runtime.get().load_program(path, device=None if device == "cpu" else device,
                                        num_threads=1 if device == "cpu" else None).load_method("forward")
    loaded = time.perf_counter()
    (values,) = columns.values()
    for row in values:
        method.execute([torch.from_numpy(row[None]).to(device)])[0].cpu()
    if device == "cuda":
        torch.cuda.synchronize()
    end = time.perf_counter()
    return end - start, loaded - start, end - loaded


def ray_job(ray, path: Path, columns: dict[str, np.ndarray], workers: int, device: str,
            batch_size: int) -> tuple[float, float, float, int]:
    """A whole job: seconds in all, until every actor had begun its first batch, after that; and the rows
    begun after it. The actors mark the start of each batch with a file (PteRunner's ``_test_dir``)."""
    marks = tempfile.mkdtemp(prefix="pterun-batch-bench-")
    ds = from_arrays(columns, rows_per_block=batch_size).map_batches(
        PteRunner, fn_constructor_kwargs={"program": str(path), "device": device, "_test_dir": marks},
        batch_size=batch_size, compute=ray.data.ActorPoolStrategy(size=workers),
        num_gpus=1 if device == "cuda" else None, batch_format="numpy")
    start = time.time()
    rows = sum(len(batch["row"]) for batch in ds.iter_batches(batch_size=None, batch_format="numpy"))
    end = time.time()
    assert rows == len(next(iter(columns.values())))
    begun = [(p.stat().st_mtime, p.name.split("-")[1]) for p in Path(marks).glob("batch-*")]
    shutil.rmtree(marks)
    firsts = {}
    for when, pid in sorted(begun):
        firsts.setdefault(pid, when)
    ready = max(firsts.values())  # every actor running
    after = rows - batch_size * sum(1 for when, _ in begun if when < ready)
    return end - start, ready - start, end - ready, after


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--vision", type=Path, default=ROOT / ".cache" / "bench" / "mobilenet_v2.pte")
    parser.add_argument("--text", type=Path, default=ROOT / "src" / "pterun" / "examples" / "llama_tiny.pte")
    parser.add_argument("--rows", default="160,320", help="rows for the vision and the text program")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    import logging

    import ray

    cuda = args.device == "cuda"
    ray.init(num_cpus=2 if not cuda else None, include_dashboard=False, logging_level=logging.WARNING,
             log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    ways = ["loop (GPU)", "1 GPU actor"] if cuda else ["loop (1 thread)", "1 actor", "2 actors"]
    programs = {"vision": args.vision, "text": args.text}
    counts = dict(zip(programs, (int(n) for n in args.rows.split(","))))
    console.print(f"{environment()}; ray {ray.__version__}; {os.cpu_count()} cores; batch {args.batch_size}")
    results: dict = {(p, w): [] for p in programs for w in ways}
    for round_ in range(args.rounds):
        for name, path in programs.items():
            columns = rows_for(path, counts[name])
            n = counts[name]
            for way in ways:
                if way.startswith("loop"):
                    total, begin, rest = loop(path, columns, args.device)
                    after = n
                else:
                    total, begin, rest, after = ray_job(ray, path, columns, int(way.split()[0]), args.device,
                                                        args.batch_size)
                results[name, way].append((n / total, after / rest, begin))
        console.print(f"round {round_ + 1} of {args.rounds} done")
    for name, path in programs.items():
        console.print(f"[bold]{name}[/bold]: {path.name}, {counts[name]} rows of "
                      f"{list(rows_for(path, 1).values())[0].shape[1:]}")
        for way in ways:
            job, steady, base = (statistics.median(r[i] for r in results[name, way]) for i in range(3))
            console.print(f"  {way:16} job {job:7.1f} rows/s   steady {steady:7.1f} rows/s   start {base:6.2f} s")


if __name__ == "__main__":
    main()
