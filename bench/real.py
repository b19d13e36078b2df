"""Realistic sizes on the CPU: every variant of each model (portable, XNNPACK fp32, int8, 8da4w), pterun
against ExecuTorch on the same file at the same thread count, and the float programs against eager PyTorch.

    python bench/export.py --real && python bench/real.py [--threads 1,2] [--repeat 10] [--portable]

ExecuTorch's portable kernels take seconds per call on these sizes (ResNet-50: about 15 s), so its
portable rows are measured only with --portable. Both runtimes get the same thread count: torch's
intra-op threads for pterun and eager (the `num_threads` pterun is loaded with, where it has that
option), ExecuTorch's XNNPACK threadpool (`_unsafe_reset_threadpool`).
"""

from __future__ import annotations

import argparse
import inspect
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, console, environment, report  # noqa: E402
from models import QUANTIZED, REAL_SET, SAME_PROGRAM, SET  # noqa: E402

import pterun  # noqa: E402
from pterun.cli.timing import Way, measure  # noqa: E402


def _load(pte: Path, threads: int):
    runtime = pterun.Runtime.get()
    options = {"num_threads": threads} if "num_threads" in inspect.signature(runtime.load_program).parameters else {}
    return runtime.load_program(pte, **options).load_method("forward")


def variants(name: str) -> list[str]:
    return ["", ".xnnpack", *(f".xnnpack-{s}" for s in QUANTIZED.get(SAME_PROGRAM.get(name, name), ()))]


def ways_for(name: str, variant: str, directory: Path, threads: int, portable: bool) -> list[Way]:
    import executorch.kernels.quantized  # noqa: F401
    from executorch.extension.pybindings import portable_lib

    inputs = torch.load(directory / f"{name}.inputs.pt")
    pte = directory / f"{name}{variant}.pte"
    ours = _load(pte, threads)
    ways = [Way("pterun", lambda: ours.execute(inputs, clone_outputs=False))]
    if variant or portable:
        theirs = portable_lib._load_for_executorch(str(pte))
        ways.append(Way("executorch", lambda: theirs.forward(inputs, clone_outputs=False)))
    if not variant:
        module, _ = SET[name]()

        def eager():
            with torch.inference_mode():
                return module(*inputs)

        ways.append(Way("eager", eager))
    return ways


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", type=Path, default=ROOT / ".cache" / "bench")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", default=f"1,{torch.get_num_threads()}")
    parser.add_argument("--models", default=",".join(REAL_SET))
    parser.add_argument("--portable", action="store_true", help="also ExecuTorch's portable kernels (slow)")
    args = parser.parse_args()
    from executorch.extension.pybindings import portable_lib

    default_threads = torch.get_num_threads()
    for threads in sorted({int(t) for t in args.threads.split(",")}):
        torch.set_num_threads(threads)
        portable_lib._unsafe_reset_threadpool(threads)
        console.print(environment())
        rows = {}
        for name in args.models.split(","):
            for variant in variants(name):
                if (args.dir / f"{name}{variant}.pte").exists():
                    rows[f"{name}{variant}"] = measure(ways_for(name, variant, args.dir, threads, args.portable),
                                                       warmup=args.warmup, repeat=args.repeat)
        report(f"realistic sizes, {threads} thread(s): median ms per call", rows, "pterun",
               ["executorch", "eager"], None)
    torch.set_num_threads(default_threads)


if __name__ == "__main__":
    main()
