"""Tiny programs (a handful of small ops) at one thread, against ExecuTorch's portable runtime.

    python bench/tiny.py [--repeat 2000] [--compile] [--json out.json]

The set (bench/tiny_models.py) is exported with ExecuTorch on first use, to .cache/bench/tiny. Every
way runs on one intra-op thread: pterun with ``num_threads=1`` (the default chooses one thread for
these programs anyway), ExecuTorch's portable kernels (single-threaded), and with ``--compile``
also pterun's ``compile=True`` (Inductor's C++ code), whose first call's compile time is reported.
Ratios divide pterun's median by ExecuTorch's: below 1.0 pterun is faster.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, console, environment, report  # noqa: E402
from tiny_models import TINY, export_tiny  # noqa: E402

import pterun  # noqa: E402
from pterun.cli.timing import Way, measure  # noqa: E402


def ways_for(pte: Path, compile_too: bool) -> list[Way]:
    from executorch.extension.pybindings import portable_lib

    inputs = torch.load(pte.with_name(f"{pte.stem}.inputs.pt"))
    runtime = pterun.Runtime.get()
    try:
        method = runtime.load_program(pte, num_threads=1).load_method("forward")
    except TypeError:  # a pterun from before num_threads (comparing against an older tree): the whole process
        torch.set_num_threads(1)
        method = runtime.load_program(pte).load_method("forward")
    et = portable_lib._load_for_executorch(str(pte))
    ways = [Way("pterun", lambda: method.execute(inputs, clone_outputs=False)),
            Way("executorch", lambda: et.forward(inputs, clone_outputs=False))]
    if compile_too:
        compiled = runtime.load_program(pte, num_threads=1, compile=True).load_method("forward")
        start = time.perf_counter()
        compiled.execute(inputs)
        console.print(f"{pte.stem}: compile=True first call {time.perf_counter() - start:.2f} s "
                      f"({compiled.compile_status})")
        ways.append(Way("pterun-compile", lambda: compiled.execute(inputs, clone_outputs=False)))
    return ways


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=2000)
    parser.add_argument("--models", default=",".join(TINY))
    parser.add_argument("--compile", action="store_true", help="also time compile=True")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    paths = export_tiny(ROOT / ".cache" / "bench" / "tiny", args.models.split(","))
    console.print(environment())
    rows = {name: measure(ways_for(path, args.compile), warmup=50, repeat=args.repeat) for name, path in paths.items()}
    against = ["executorch"] + (["pterun-compile"] if args.compile else [])
    report("tiny programs, 1 thread: median ms per call", rows, "pterun", against, args.json)


if __name__ == "__main__":
    main()
