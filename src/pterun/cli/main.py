"""`pterun run`, `pterun inspect`, `pterun bench`, `pterun test`: run a program's method, show what a program
holds, time it, run a bundled program's test cases; `pterun profile` and `pterun compare` (profile.py,
compare.py): where a method's time goes, and how far its values are from a reference's."""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Optional

import torch
import typer
from rich.table import Table

from pterun import Runtime
from pterun.cli import progress
from pterun.cli.batch import batch
from pterun.cli.bundled import run_tests
from pterun.cli.compare import compare
from pterun.cli.generate import generate
from pterun.cli.inputs import describe, load_inputs, random_inputs
from pterun.cli.inspect import inspect
from pterun.cli.options import device_option, example_program, trust_native_code_option
from pterun.cli.profile import profile
from pterun.cli.report import console, esc, reported, state
from pterun.version import VERSION

# How bench compares each way with pterun: pterun's median time over the way's.
RATIO = "pterun ÷ this"

# Help texts are Markdown: an example block renders as a block in the terminal and on the docs site alike.
app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode="markdown",
                  help="Run and inspect ExecuTorch programs (.pte).")


def _version(shown: bool) -> None:
    if shown:
        typer.echo(f"pterun {VERSION}")
        raise typer.Exit()


@app.callback()
def options(
    debug: bool = typer.Option(
        False, "--debug", envvar="PTERUN_DEBUG", help="Show the Python traceback of an error instead of one line."
    ),
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print pterun's version and exit."
    ),
) -> None:
    state.debug = debug


@app.command()
def run(
    program: Optional[Path] = typer.Argument(None, help="The .pte file; the bundled example when left out."),
    method: str = typer.Option("forward", "--method", "-m", help="The method to run."),
    data: Optional[list[Path]] = typer.Option(None, "--data", "-d", help=".ptd file(s) with external tensors."),
    inputs: Optional[Path] = typer.Option(
        None, "--inputs", "-i", help=".pt or .npz file of inputs; else random ones drawn from the method's metadata."
    ),
    device: Optional[str] = typer.Option(None, "--device", help="Run every kernel on this device (cpu, cuda)."),
    repeat: int = typer.Option(10, "--repeat", "-n", min=1, help="Timed runs."),
    warmup: int = typer.Option(2, "--warmup", min=0, help="Runs before the timed ones, not counted."),
    seed: int = typer.Option(0, "--seed", help="Seed of the random inputs (without --inputs)."),
    compile: bool = typer.Option(
        False, "--compile", help="Hand the method to torch.compile (compile=True); the first run compiles."
    ),
    allow_tf32: bool = typer.Option(
        False, "--allow-tf32", help="Let float32 products and convolutions on CUDA use TF32 (docs/precision.md)."
    ),
    trust_native_code: bool = trust_native_code_option(),
) -> None:
    """Run a method with random inputs (or --inputs) and print its outputs and timings.

    **Examples**

    ```
    pterun run
    pterun run model.pte --inputs inputs.pt --device cuda
    pterun run model.pte --method decode --seed 3 --repeat 100
    pterun run et_cuda.pte --data aoti_cuda_blob.ptd --trust-native-code
    ```
    """
    path = program or example_program()
    with reported(), progress.steps() as shown:
        device = device_option(device)
        start = time.perf_counter()
        with shown.step(f"loading {esc(path.name)}"):
            loaded = Runtime.get().load_program(path, data_path=data or None, device=device, compile=compile,
                                                allow_tf32=allow_tf32, trust_native_code=trust_native_code)
            m = loaded.load_method(method)
        load_s = time.perf_counter() - start
        input_device = device or "cpu"
        if inputs:
            args, source = load_inputs(inputs, input_device), esc(inputs)
        else:
            args, source = random_inputs(m.metadata, input_device, seed), f"random from the metadata, seed {seed}"
        sync = torch.cuda.synchronize if input_device.startswith("cuda") else (lambda: None)
        times = []
        outputs = None
        advance = shown.counted(progress.running(compile), warmup + repeat)
        for i in range(warmup + repeat):
            t0 = time.perf_counter()
            outputs = m.execute(args)
            sync()
            if i >= warmup:
                times.append(time.perf_counter() - t0)
            advance()
    console.print(f"inputs ({source}): {esc(describe(args))}", highlight=False, soft_wrap=True)
    table = Table(title=f"{esc(path.name)} :: {esc(method)}")
    for column in ("output", "kind", "dtype", "shape", "device", "summary"):
        table.add_column(column)
    for i, out in enumerate(outputs):
        if isinstance(out, torch.Tensor):
            summary = ""
            if out.numel() and (out.is_floating_point() or not out.dtype.is_complex):
                f = out.detach().float()
                summary = f"min {f.min().item():.4g}  max {f.max().item():.4g}  mean {f.mean().item():.4g}"
            table.add_row(str(i), "Tensor", str(out.dtype).removeprefix("torch."), str(list(out.shape)),
                          str(out.device), summary)
        else:
            table.add_row(str(i), esc(type(out).__name__), "", "", "", esc(repr(out)))
    console.print(table)
    ms = [t * 1e3 for t in times]
    console.print(
        f"load {load_s * 1e3:.1f} ms · execute median {statistics.median(ms):.3f} ms "
        f"(min {min(ms):.3f}, max {max(ms):.3f}, {repeat} runs after {warmup} warm-up)"
    )
    if compile:
        console.print(f"torch.compile: {esc(m.compile_status)}", highlight=False)


app.command()(inspect)


@app.command()
def bench(
    program: Optional[Path] = typer.Argument(None, help="The .pte file; the bundled example when left out."),
    method: str = typer.Option("forward", "--method", "-m", help="The method to time."),
    data: Optional[list[Path]] = typer.Option(None, "--data", "-d", help=".ptd file(s) with external tensors."),
    device: str = typer.Option("cpu", "--device", help="cpu or cuda"),
    against: str = typer.Option(
        "auto", "--against", help="Comma-separated: executorch, eager; 'auto' is executorch where it is installed."
    ),
    model: Optional[str] = typer.Option(
        None, "--model", help="For eager: 'package.module:function' returning the nn.Module the program came from."
    ),
    inputs: Optional[Path] = typer.Option(
        None, "--inputs", "-i", help=".pt or .npz file of inputs; else random ones drawn from the method's metadata."
    ),
    repeat: int = typer.Option(50, "--repeat", "-n", min=1, help="Timed rounds; each runs every way once."),
    warmup: int = typer.Option(5, "--warmup", min=0, help="Untimed runs of each way before the rounds."),
    compile: bool = typer.Option(
        False, "--compile", help="Hand pterun's method to torch.compile (compile=True); its first run compiles."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the results as JSON."),
    allow_tf32: bool = typer.Option(
        False, "--allow-tf32", help="Let float32 products and convolutions on CUDA use TF32 (docs/precision.md)."
    ),
    trust_native_code: bool = trust_native_code_option(),
) -> None:
    """Time pterun against other ways of running the same program, interleaved in one process.

    **Examples**

    ```
    pterun bench
    pterun bench model.pte --against executorch,eager --model mypkg.models:make
    pterun bench model.pte --device cuda --compile --json
    ```
    """
    import json

    from pterun.cli.timing import measure
    from pterun.cli.ways import other_ways, pterun_ways

    path = program or example_program()
    if against == "auto":
        import importlib.util

        against = "executorch" if importlib.util.find_spec("executorch") and device == "cpu" else ""
    with reported(), progress.steps() as shown:
        device_option(device)
        with shown.step(f"loading {esc(path.name)}"):
            loaded = Runtime.get().load_program(path, data_path=data or None,
                                                device=None if device == "cpu" else device, compile=compile,
                                                allow_tf32=allow_tf32, trust_native_code=trust_native_code)
            m = loaded.load_method(method)
            args = load_inputs(inputs, device) if inputs else random_inputs(m.metadata, device, 0)
            ways = pterun_ways(m, args, device) + other_ways(
                [w for w in against.split(",") if w], path, data or [], method, args, device, model
            )
        warmed = shown.counted("warm-up" + (" (pterun's first run compiles)" if compile else ""), warmup * len(ways))
        timings = measure(ways, warmup=warmup, repeat=repeat, warmed=warmed, timed=shown.counted("rounds", repeat))
    base = timings[0].median
    if as_json:
        print(json.dumps({"program": str(path), "method": method, "device": device,
                          "results": [dict(t.as_dict(), pterun_over_this=base / t.median) for t in timings]}))
        return
    table = Table(title=f"{esc(path.name)} :: {esc(method)} on {esc(device)} "
                        f"({repeat} interleaved runs after {warmup} warm-up)")
    for column in ("way", "median ms", "p10–p90 ms", RATIO):
        table.add_column(column, justify="right" if column != "way" else "left")
    if any(t.device_ms for t in timings):
        table.add_column("host median ms", justify="right")
    for t in timings:
        low, high = t.spread
        row = [t.name, f"{t.median:.3f}", f"{low:.3f}–{high:.3f}", f"{base / t.median:.2f}×"]
        if t.device_ms:
            row.append(f"{t.host_median:.3f}")
        table.add_row(*row)
    console.print(table)
    console.print(f"{RATIO}: below 1 means pterun is faster, above 1 that this way is", highlight=False,
                  soft_wrap=True)


app.command("test")(run_tests)
app.command()(profile)
app.command()(compare)
app.command()(generate)
app.command()(batch)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
