"""CPU timings: pterun's XNNPACK interpretation against ExecuTorch's XNNPACK runtime, same programs.

    PTERUN_PROGRAM_CACHE=... python bench/xnnpack.py [--threads N] [--runs N] [--only a,b] [--int8]

Float programs: the XNNPACK exports of tests.support.models (small configs) and
every ``.cache/bench/<name>.xnnpack.pte`` with its ``<name>.inputs.pt`` (``python bench/export.py``);
``--int8`` adds the quantized test programs. Both runtimes run in this process,
on the same inputs, interleaved call by call after a warm-up, with the same
number of threads (torch's intra-op threads for pterun, ExecuTorch's threadpool
for XNNPACK); the table gives each one's median and pterun's over ExecuTorch's.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import pterun  # noqa: E402

# tests.support.models names exported with XnnpackPartitioner (program cache).
TEST_MODELS = ("mobilenet_v2", "resnet", "vit", "bert", "llama", "et_ds_cnn")


def _programs(args):
    from tests.backends.xnnpack.programs import export_model, export_quantized, quantized_inputs
    from tests.support.differential import flat
    from tests.support.models import build

    for name in TEST_MODELS:
        yield f"test {name}", export_model(name).pte, flat(build(name).make_inputs(0))
    for pte in sorted(args.dir.glob("*.xnnpack.pte")):  # float exports; quantized ones are *.xnnpack-<scheme>.pte
        name = pte.name.removesuffix(".xnnpack.pte")
        if (args.dir / f"{name}.inputs.pt").exists():
            yield f"bench {name}", pte, list(torch.load(args.dir / f"{name}.inputs.pt"))
    if args.int8:
        for model, scheme in (("convnet", "per-channel"), ("mlp", "per-tensor"), ("mlp", "dynamic")):
            yield f"int8 {model} ({scheme})", export_quantized(model, scheme).pte, list(quantized_inputs(model, 0))


def time_pair(ours, theirs, warmup: int, runs: int) -> tuple[float, float]:
    """Medians (ms) of two callables run alternately, each call timed on its own."""
    a, b = [], []
    for i in range(warmup + runs):
        t0 = time.perf_counter()
        ours()
        t1 = time.perf_counter()
        theirs()
        t2 = time.perf_counter()
        if i >= warmup:
            a.append(t1 - t0)
            b.append(t2 - t1)
    return statistics.median(a) * 1e3, statistics.median(b) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--dir", type=Path, default=ROOT / ".cache" / "bench")
    parser.add_argument("--only", default="", help="comma-separated substrings of program names")
    parser.add_argument("--int8", action="store_true")
    args = parser.parse_args()
    from executorch.extension.pybindings import portable_lib

    torch.set_num_threads(args.threads)
    portable_lib._unsafe_reset_threadpool(args.threads)
    only = [s for s in args.only.split(",") if s]
    rows = []
    for name, pte, inputs in _programs(args):
        if only and not any(s in name for s in only):
            continue
        method = pterun.Runtime.get().load_program(pte).load_method("forward")
        reference = portable_lib._load_for_executorch(str(pte))
        a, b = time_pair(lambda method=method, inputs=inputs: method.execute(inputs, clone_outputs=False),
                         lambda reference=reference, inputs=inputs: reference.run_method("forward", inputs),
                         args.warmup, args.runs)
        rows.append((name, a, b, a / b))
        print(f"{name:28s} pterun {a:8.3f} ms   ExecuTorch XNNPACK {b:8.3f} ms   ratio {a / b:6.2f}", flush=True)
    print(f"\n{args.threads} thread(s), torch {torch.__version__}")
    print("| program | pterun (ms) | ExecuTorch XNNPACK (ms) | ratio |\n| --- | ---: | ---: | ---: |")
    for name, a, b, r in rows:
        print(f"| {name} | {a:.3f} | {b:.3f} | {r:.2f} |")
    if rows:
        ratios = [r for *_, r in rows]
        print(f"| median | | | {statistics.median(ratios):.2f} (max {max(ratios):.2f}) |")


if __name__ == "__main__":
    main()
