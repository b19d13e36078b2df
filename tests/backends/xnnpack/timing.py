"""CPU timings: pterun's XNNPACK interpretation against ExecuTorch's XNNPACK runtime, same programs.

    PTERUN_PROGRAM_CACHE=... python -m tests.backends.xnnpack.timing [--threads N] [--runs N]

Both runtimes run in this process, on the same inputs, interleaved call by call
after a warm-up, with the same number of threads (torch's intra-op threads for
pterun, ExecuTorch's threadpool for XNNPACK); the table gives each one's median.
Not a test: run it by hand.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import pterun
from tests.backends.xnnpack.programs import export_model, export_quantized, quantized_inputs
from tests.support.differential import flat
from tests.support.models import build
from tests.support.oracle import reference_module


def _programs():
    for name in ("mobilenet_v2", "resnet", "vit", "bert", "llama"):
        yield name, export_model(name), flat(build(name).make_inputs(0))
    for model, scheme in (("convnet", "per-channel"), ("mlp", "per-tensor"), ("mlp", "dynamic")):
        yield f"int8 {model} ({scheme})", export_quantized(model, scheme), list(quantized_inputs(model, 0))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    for name, exported, inputs in _programs():
        method = pterun.Runtime.get().load_program(exported.pte).load_method("forward")
        reference = reference_module(exported.pte)
        from executorch.extension.pybindings import portable_lib

        portable_lib._unsafe_reset_threadpool(args.threads)
        ours, theirs = [], []
        for i in range(args.warmup + args.runs):
            t0 = time.perf_counter()
            method.execute(inputs, clone_outputs=False)
            t1 = time.perf_counter()
            reference.run_method("forward", inputs)
            t2 = time.perf_counter()
            if i >= args.warmup:
                ours.append(t1 - t0)
                theirs.append(t2 - t1)
        a, b = statistics.median(ours) * 1e3, statistics.median(theirs) * 1e3
        rows.append((name, a, b, a / b))
        print(f"{name:28s} pterun {a:8.3f} ms   ExecuTorch XNNPACK {b:8.3f} ms   ratio {a / b:6.2f}", flush=True)
    print("\n| program | pterun (ms) | ExecuTorch XNNPACK (ms) | ratio |\n| --- | ---: | ---: | ---: |")
    for name, a, b, r in rows:
        print(f"| {name} | {a:.3f} | {b:.3f} | {r:.2f} |")


if __name__ == "__main__":
    main()
