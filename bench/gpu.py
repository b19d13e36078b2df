"""GPU benchmarks: pterun (device="cuda", CUDA-graph replay) against eager PyTorch and torch.compile.

    python bench/export.py                      # where ExecuTorch is installed: writes .cache/bench/gpu/*.pte.xz
    python bench/gpu.py [--models a,b] [--json out.json]   # on the GPU machine

Ways, all on the same inputs, interleaved in one process and timed with CUDA
events (device time; host time with synchronization is printed beside it):
pterun, pterun without graphs, eager, a CUDA graph of eager, torch.compile,
and torch.compile(mode="reduce-overhead"). Device time per call includes the GPU
waiting for the host's work; ``--busy`` (always on for the SwiGLU MLP) also times
each way's GPU work alone, and ``host_us`` each way's host time per call. For the
bf16 SwiGLU MLP the floor is its weight bytes over the device-to-device copy
bandwidth measured here.
"""

from __future__ import annotations

import argparse
import lzma
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, console, copy_bandwidth, environment, report  # noqa: E402
from models import GPU_SET, SET  # noqa: E402

import pterun  # noqa: E402
from pterun.cli.timing import Way, measure  # noqa: E402


def eager_graph(module, inputs):
    static = [x.clone() for x in inputs]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.inference_mode():
        for _ in range(3):
            module(*static)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph), torch.inference_mode():
        module(*static)

    def replay():
        for s, x in zip(static, inputs):
            s.copy_(x)
        graph.replay()

    return replay


def ways_for(name: str, pte: Path, include_compile: bool) -> tuple[list[Way], pterun.Method]:
    """The ways, and pterun's method loaded with compile=True (its status, once called, says what it runs)."""
    module, inputs = SET[name]()
    module = module.cuda().eval()
    inputs = [x.cuda() for x in inputs]
    program = pterun.Runtime.get().load_program(pte, device="cuda")
    method = program.load_method("forward")
    plain = pterun.Runtime.get().load_program(pte, device="cuda", cuda_graphs=False).load_method("forward")
    inductor = pterun.Runtime.get().load_program(pte, device="cuda", compile=True).load_method("forward")
    console.print(f"{name}: pterun-compile {inductor.compile_status}; pterun runs a fused SwiGLU kernel: "
                  f"{'pterun::swiglu.out' in method.source}")

    def eager():
        with torch.inference_mode():
            return module(*inputs)

    ways = [
        Way("pterun", lambda: method.execute(inputs, clone_outputs=False), cuda=True),
        Way("pterun-compile", lambda: inductor.execute(inputs, clone_outputs=False), cuda=True),
        Way("pterun-no-graph", lambda: plain.execute(inputs, clone_outputs=False), cuda=True),
        Way("eager", eager, cuda=True),
        Way("eager-graph", eager_graph(module, inputs), cuda=True),
    ]
    if include_compile:
        for mode, label in ((None, "compile"), ("reduce-overhead", "compile-ro")):
            compiled = torch.compile(module, mode=mode)

            def call(compiled=compiled):
                with torch.inference_mode():
                    return compiled(*inputs)

            ways.append(Way(label, call, cuda=True))
    # Check pterun against eager once, so a fast wrong answer cannot pass unnoticed.
    theirs = eager()
    theirs = (theirs[0] if isinstance(theirs, (tuple, list)) else theirs).float()
    for label, m in (("pterun", method), ("pterun-compile", inductor)):
        ours = m.execute(inputs)[0].float()
        error = ((ours - theirs).norm() / theirs.norm().clamp_min(1e-12)).item()
        console.print(f"{name}: {label} vs eager relative error {error:.2e}")
    return ways, inductor


def busy_ms(call, repeat: int) -> float:
    """Median device time of one call with the host's work hidden: the call is enqueued while the GPU
    spins (about 0.5 ms), so the events time the GPU's work alone, not the GPU waiting for the host."""
    times = []
    for _ in range(repeat):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        torch.cuda._sleep(1_000_000)
        begin.record()
        call()
        end.record()
        torch.cuda.synchronize()
        times.append(begin.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def host_us(call, calls: int = 200) -> float:
    """Host time of one call, µs: ``calls`` calls back to back, unsynchronized, after warm-up. The GPU runs them
    meanwhile and the host never waits for it (fewer calls than the launch queue holds), so this is the
    host's own path: for pterun, ``execute()``'s Python and the replay's launch."""
    for _ in range(10):
        call()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    host = time.perf_counter() - start
    torch.cuda.synchronize()
    return host / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", type=Path, default=ROOT / ".cache" / "bench" / "gpu")
    parser.add_argument("--models", default=",".join(GPU_SET))
    parser.add_argument("--repeat", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--busy", action="store_true", help="also time each way's GPU work alone (busy_ms)")
    args = parser.parse_args()
    # pterun computes float32 in float32 whatever is set (docs/precision.md); so must the eager and
    # torch.compile baselines, or they would be timed on TF32 convolutions.
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    console.print(environment(), torch.cuda.get_device_name())
    bandwidth = copy_bandwidth()
    console.print(f"device-to-device copy: {bandwidth / 1e12:.2f} TB/s")
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            pte = Path(tmp) / f"{name}.pte"
            pte.write_bytes(lzma.decompress((args.dir / f"{name}.pte.xz").read_bytes()))
            try:
                ways, compiled = ways_for(name, pte, not args.no_compile)
                rows[name] = measure(ways, warmup=args.warmup, repeat=args.repeat)
                console.print(name, "  ".join(f"{t.name} {t.median:.3f}" for t in rows[name]))
                # Captured by now: which code its graphs replay (the compiled or the plain), and the times that chose.
                console.print(f"{name}: pterun-compile after the runs: {compiled.compile_status}", highlight=False)
                console.print(name, "host µs a call:", "  ".join(f"{w.name} {host_us(w.call):.1f}" for w in ways))
                timed = args.busy or name == "swiglu_bf16"
                busy = {w.name: busy_ms(w.call, args.repeat) for w in ways} if timed else {}
                if busy:
                    console.print(name, "GPU busy:", "  ".join(f"{k} {v:.3f}" for k, v in busy.items()))
            except Exception:  # noqa: BLE001 - one model failing should not hide the others' numbers
                console.print(f"[red]{name} failed[/red]\n{traceback.format_exc()}")
            # Each model's baselines compile the same wrapper classes in two torch.compile modes; past
            # Dynamo's recompilation limit, PyTorch's own ways alone (eager CUDA graph, compile and
            # reduce-overhead, no pterun loaded) ended in an illegal memory access at the SwiGLU step.
            # Every model starts from clean Dynamo caches, as it would in a process of its own.
            torch._dynamo.reset()
            if name == "swiglu_bf16" and name in rows:
                _, weights = SET[name]()
                floor_s = sum(w.numel() * w.element_size() for w in weights[1:]) / bandwidth
                for timing in rows[name]:
                    console.print(f"swiglu_bf16: floor {floor_s * 1e6:.1f} µs, {timing.name} "
                                  f"{timing.median * 1e3:.1f} µs = {floor_s / (timing.median / 1e3):.0%} of it; "
                                  f"GPU busy {busy[timing.name] * 1e3:.1f} µs = "
                                  f"{floor_s / (busy[timing.name] / 1e3):.0%} of it")
    for base in ("pterun", "pterun-compile"):
        report(f"GPU: median device ms per call ({base} against the others)", rows, base,
               ["eager", "eager-graph", "compile", "compile-ro"], args.json.with_suffix(f".{base}.json")
               if args.json else None)


if __name__ == "__main__":
    main()
