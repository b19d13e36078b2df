"""Differential fuzzing of pterun against ExecuTorch's runtime (and eager PyTorch), for a while.

    python scripts/fuzz.py --minutes 30 [--seed S] [--lowering portable|xnnpack|both] [--workers K]

Random valid programs (tests/fuzz/generator.py) are exported with ExecuTorch,
run on its runtime, on pterun and eagerly; the summary counts programs, discarded
exports, agreements, ExecuTorch-only findings and pterun failures by kind. Failures
are shrunk and written as regression specs (tests/fuzz/regressions/ by default),
which tests/fuzz/test_regressions.py replays. Programs from one seed are the same
on every run, so a campaign is reproducible from its first seed. Needs the test
extras (ExecuTorch). Exit status 1 if pterun failed on any program.
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fuzz.campaign import campaign  # noqa: E402
from tests.fuzz.regression import DIRECTORY  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, required=True, help="how long to generate and run programs")
    parser.add_argument("--seed", type=int, default=None, help="first seed (default: a random one, printed)")
    parser.add_argument("--lowering", choices=("portable", "xnnpack", "both"), default="both")
    parser.add_argument(
        "--workers", type=int, default=2, help="worker processes (each runs one program at a time)"
    )
    parser.add_argument("--shrink-seconds", type=float, default=300, help="time to shrink one failure")
    parser.add_argument("--shrink-per-kind", type=int, default=2, help="failures of one kind to shrink")
    parser.add_argument(
        "--shrink-executorch",
        type=int,
        default=1,
        help="ExecuTorch-only findings of one kind to shrink and record",
    )
    parser.add_argument("--out", type=Path, default=DIRECTORY, help="where regression specs are written")
    parser.add_argument("--report", type=Path, default=None, help="write every program's verdict here (JSON)")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (exports, logs)")
    args = parser.parse_args()
    if args.seed is None:
        args.seed = random.randrange(10**6) * 1000
    args.lowerings = "portable,xnnpack" if args.lowering == "both" else args.lowering
    return campaign(args)


if __name__ == "__main__":
    sys.exit(main())
