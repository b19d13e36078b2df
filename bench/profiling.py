"""What ETDump profiling costs, on and off, against ExecuTorch's runtime with and without its ETDump.

    python bench/profiling.py [--models tiny_mlp,resnet18,...] [--repeat 300] [--json out.json]

Programs come from bench/export.py (.cache/bench). Ways, interleaved in one process, one thread:
``pterun`` (loaded as usual), ``pterun-etdump`` (``enable_etdump=True``: every instruction and every
delegate node timed), ``executorch`` and ``executorch-etdump`` (its runtime, with its ETDump). Both ETDump
ways write their dump every 100 calls, inside the timed calls, so neither grows without end.

Profiling is chosen at load: a program loaded without it runs the same generated code as before ETDump
existed. To see that, run this script on two trees (``PYTHONPATH=<other tree>/src``): the
``pterun / executorch`` column measures the unprofiled path against the same anchor in each process; a
tree without ETDump leaves out the ETDump ways.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, console, environment, report  # noqa: E402

import pterun  # noqa: E402
from pterun.cli.timing import Way, measure  # noqa: E402

MODELS = "tiny_mlp,example_llama,llama,mobilenet_v2.xnnpack,resnet18.xnnpack"
WRITE_EVERY = 100


def _draining(call, write):
    count = 0

    def run():
        nonlocal count
        call()
        count += 1
        if count % WRITE_EVERY == 0:
            write()

    return run


def ways_for(pte: Path, inputs: list, scratch: str) -> list[Way]:
    from executorch.extension.pybindings import portable_lib

    runtime = pterun.Runtime.get()
    method = runtime.load_program(pte, num_threads=1).load_method("forward")
    et = portable_lib._load_for_executorch(str(pte))
    ways = [Way("pterun", lambda: method.execute(inputs, clone_outputs=False)),
            Way("executorch", lambda: et.forward(inputs, clone_outputs=False))]
    traced_program = runtime.load_program(pte, num_threads=1, enable_etdump=True)
    if not hasattr(traced_program, "write_etdump_result_to_file"):  # a tree from before ETDump: the plain path only
        return ways
    traced = traced_program.load_method("forward")
    et_traced = portable_lib._load_for_executorch(str(pte), enable_etdump=True)
    ours, theirs = os.path.join(scratch, "pterun.etdp"), os.path.join(scratch, "executorch.etdp")
    ways += [
        Way("pterun-etdump", _draining(lambda: traced.execute(inputs, clone_outputs=False),
                                       lambda: traced_program.write_etdump_result_to_file(ours))),
        Way("executorch-etdump", _draining(lambda: et_traced.forward(inputs, clone_outputs=False),
                                           lambda: et_traced.write_etdump_result_to_file(theirs))),
    ]
    return ways


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", default=MODELS)
    parser.add_argument("--repeat", type=int, default=300)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    from executorch.extension.pybindings import portable_lib

    torch.set_num_threads(1)  # ExecuTorch's portable kernels run on one thread
    portable_lib._unsafe_reset_threadpool(1)  # and its XNNPACK delegates on its own pool: one thread too
    directory = ROOT / ".cache" / "bench"
    console.print(environment())
    rows = {}
    with tempfile.TemporaryDirectory() as scratch:
        for name in args.models.split(","):
            pte = directory / f"{name}.pte"
            if not pte.exists():
                console.print(f"{name}: {pte} missing (python bench/export.py)")
                continue
            inputs = list(torch.load(directory / f"{name.split('.')[0]}.inputs.pt"))
            rows[name] = measure(ways_for(pte, inputs, scratch), warmup=10, repeat=args.repeat)
    report("without profiling, 1 thread: median ms per call", rows, "pterun", ["executorch"], args.json)
    if any(t.name == "pterun-etdump" for timings in rows.values() for t in timings):
        report("with ETDump, 1 thread: what profiling costs (pterun-etdump / pterun) and against ExecuTorch's",
               rows, "pterun-etdump", ["pterun", "executorch-etdump"], None)


if __name__ == "__main__":
    main()
