"""CPU benchmarks: pterun against ExecuTorch (portable and XNNPACK-lowered) and eager PyTorch.

    python bench/export.py && python bench/cpu.py [--repeat 30] [--threads N] [--json out.json]

Every way runs the same model on the same inputs, interleaved in one process
(pterun.cli.timing). The ratio column divides pterun's median by the other
way's: below 1.0 pterun is faster.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, console, environment, report  # noqa: E402
from models import CPU_SET, SET  # noqa: E402

import pterun  # noqa: E402
from pterun.cli.timing import Way, measure  # noqa: E402


def ways_for(name: str, directory: Path) -> list[Way]:
    import executorch.kernels.quantized  # noqa: F401
    from executorch.extension.pybindings import portable_lib

    inputs = torch.load(directory / f"{name}.inputs.pt")
    pte, xnn = directory / f"{name}.pte", directory / f"{name}.xnnpack.pte"
    method = pterun.Runtime.get().load_program(pte).load_method("forward")
    et = portable_lib._load_for_executorch(str(pte))
    et_xnn = portable_lib._load_for_executorch(str(xnn))
    module, _ = SET[name]()

    def eager():
        with torch.inference_mode():
            return module(*inputs)

    return [
        Way("pterun", lambda: method.execute(inputs, clone_outputs=False)),
        Way("executorch", lambda: et.forward(inputs, clone_outputs=False)),
        Way("executorch-xnnpack", lambda: et_xnn.forward(inputs, clone_outputs=False)),
        Way("eager", eager),
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", type=Path, default=ROOT / ".cache" / "bench")
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--models", default=",".join(CPU_SET))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    console.print(environment())
    rows = {}
    for name in args.models.split(","):
        rows[name] = measure(ways_for(name, args.dir), warmup=args.warmup, repeat=args.repeat)
    report("CPU: median ms per call", rows, "pterun", ["executorch", "executorch-xnnpack", "eager"], args.json)


if __name__ == "__main__":
    main()
