"""`pterun run`: run a program's method and print its outputs and timings."""

from __future__ import annotations

import statistics
import time
from typing import Optional

import torch
import typer
from rich.table import Table

from pterun import Runtime
from pterun.cli import progress
from pterun.cli.inputs import default_method, describe, drawn_inputs, language_model_note, load_inputs
from pterun.cli.options import (
    AllowTf32,
    DataFiles,
    DeviceName,
    InputsFile,
    ProgramPath,
    TrustNativeCode,
    device_option,
    example_program,
    input_device,
)
from pterun.cli.report import console, esc, reported


def run(
    program: ProgramPath = None,
    method: Optional[str] = typer.Option(
        None, "--method", "-m", help="The method to run (default: forward; a multimodal LLM's text_decoder)."
    ),
    data: DataFiles = None,
    inputs: InputsFile = None,
    device: DeviceName = None,
    repeat: int = typer.Option(10, "--repeat", "-n", min=1, help="Timed runs."),
    warmup: int = typer.Option(2, "--warmup", min=0, help="Runs before the timed ones, not counted."),
    seed: int = typer.Option(0, "--seed", help="Seed of the random inputs (without --inputs)."),
    compile: bool = typer.Option(
        False, "--compile", help="Hand the method to torch.compile (compile=True); the first run compiles."
    ),
    allow_tf32: AllowTf32 = False,
    trust_native_code: TrustNativeCode = False,
) -> None:
    """Run a method with random inputs (or --inputs) and print its outputs and timings.

    A language model's decoder gets valid random inputs: token ids in its vocabulary, as many as a call takes
    within the context, from position 0.

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
            method = method or default_method(loaded)
            m = loaded.load_method(method)
        load_s = time.perf_counter() - start
        on = input_device(device)
        if inputs:
            args, source = load_inputs(inputs, on), esc(inputs)
        else:
            args, source = drawn_inputs(loaded, method, m.metadata, on, seed)
        sync = torch.cuda.synchronize if on.startswith("cuda") else (lambda: None)
        times = []
        outputs: list = []
        advance = shown.counted(progress.running(compile), warmup + repeat)
        for i in range(warmup + repeat):
            t0 = time.perf_counter()
            outputs = m.execute(args)
            sync()
            if i >= warmup:
                times.append(time.perf_counter() - t0)
            advance()
    note = language_model_note(loaded, path)
    if note is not None:
        console.print(note, highlight=False, soft_wrap=True)
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
