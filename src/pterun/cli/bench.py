"""`pterun bench`: time pterun against other ways of running the same program, interleaved in one process."""

from __future__ import annotations

import json
from typing import Optional

import typer
from rich.table import Table

from pterun import Runtime
from pterun.cli import progress
from pterun.cli.inputs import default_method, drawn_inputs, language_model_note, load_inputs
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
from pterun.cli.timing import measure
from pterun.cli.ways import other_ways, pterun_ways

# How bench compares each way with pterun: pterun's median time over the way's.
RATIO = "pterun ÷ this"


def bench(
    program: ProgramPath = None,
    method: Optional[str] = typer.Option(
        None, "--method", "-m", help="The method to time (default: forward; a multimodal LLM's text_decoder)."
    ),
    data: DataFiles = None,
    device: DeviceName = None,
    against: str = typer.Option(
        "auto", "--against", help="Comma-separated: executorch, eager; 'auto' is executorch where it is installed."
    ),
    model: Optional[str] = typer.Option(
        None, "--model", help="For eager: 'package.module:function' returning the nn.Module the program came from."
    ),
    inputs: InputsFile = None,
    repeat: int = typer.Option(50, "--repeat", "-n", min=1, help="Timed rounds; each runs every way once."),
    warmup: int = typer.Option(5, "--warmup", min=0, help="Untimed runs of each way before the rounds."),
    compile: bool = typer.Option(
        False, "--compile", help="Hand pterun's method to torch.compile (compile=True); its first run compiles."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the results as JSON."),
    allow_tf32: AllowTf32 = False,
    trust_native_code: TrustNativeCode = False,
) -> None:
    """Time pterun against other ways of running the same program, interleaved in one process.

    **Examples**

    ```
    pterun bench
    pterun bench model.pte --against executorch,eager --model mypkg.models:make
    pterun bench model.pte --device cuda --compile --json
    ```
    """
    path = program or example_program()
    on = input_device(device)  # without --device: the program's own placement, timed with inputs on the CPU
    if against == "auto":
        import importlib.util

        against = "executorch" if importlib.util.find_spec("executorch") and on == "cpu" else ""
    with reported(), progress.steps() as shown:
        device_option(device)
        with shown.step(f"loading {esc(path.name)}"):
            loaded = Runtime.get().load_program(path, data_path=data or None,
                                                device=None if on == "cpu" else device, compile=compile,
                                                allow_tf32=allow_tf32, trust_native_code=trust_native_code)
            method = method or default_method(loaded)
            m = loaded.load_method(method)
            args = load_inputs(inputs, on) if inputs else drawn_inputs(loaded, method, m.metadata, on, 0)[0]
            ways = pterun_ways(m, args, on) + other_ways(
                [w for w in against.split(",") if w], path, data or [], method, args, on, model
            )
        warmed = shown.counted("warm-up" + (" (pterun's first run compiles)" if compile else ""), warmup * len(ways))
        timings = measure(ways, warmup=warmup, repeat=repeat, warmed=warmed, timed=shown.counted("rounds", repeat))
    base = timings[0].median
    note = language_model_note(loaded, path)
    if as_json:
        print(json.dumps({"program": str(path), "method": method, "device": on,
                          "results": [dict(t.as_dict(), pterun_over_this=base / t.median) for t in timings]}))
        return
    table = Table(title=f"{esc(path.name)} :: {esc(method)} on {esc(on)} "
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
    if note is not None:
        console.print(note, highlight=False, soft_wrap=True)
    console.print(f"{RATIO}: below 1 means pterun is faster, above 1 that this way is", highlight=False,
                  soft_wrap=True)
