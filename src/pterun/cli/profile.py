"""`pterun profile`: where a method's time goes, operator by operator and node by node inside delegates."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import torch
import typer
from rich.table import Table

from pterun.cli import progress, traced
from pterun.cli.etdump_spans import Profile, chrome_trace, profile_rows
from pterun.cli.inputs import default_method, language_model_note
from pterun.cli.options import DataFiles, DeviceName, ProgramPath, device_option, example_program, input_device
from pterun.cli.report import UserError, console, esc, reported


def profile(
    program: ProgramPath = None,
    method: Optional[str] = typer.Option(
        None, "--method", "-m", help="The method to profile (default: forward; a multimodal LLM's text_decoder)."
    ),
    data: DataFiles = None,
    inputs: Optional[Path] = typer.Option(None, "--inputs", "-i", help=".pt or .npz file of inputs."),
    device: DeviceName = None,
    iterations: int = typer.Option(10, "--iterations", "-n", min=1, help="Profiled runs."),
    warmup: int = typer.Option(2, "--warmup", min=0, help="Runs before the profiled ones, not counted."),
    seed: int = typer.Option(0, "--seed", help="Seed of the random inputs (without --inputs)."),
    trace: Optional[Path] = typer.Option(
        None, "--trace", help="Write a Chrome/Perfetto trace (JSON) here: open it in ui.perfetto.dev."
    ),
    etdump: Optional[Path] = typer.Option(
        None, "--etdump", help="Also write the profiled runs' ETDump here (ExecuTorch's Inspector reads it)."
    ),
    top: int = typer.Option(0, "--top", min=0, help="List only the N slowest operators (0: all)."),
    as_json: bool = typer.Option(False, "--json", help="Print the table as JSON."),
) -> None:
    """Run a method with ETDump on and show its operators (and delegate nodes) by total time.

    **Examples**

    ```
    pterun profile
    pterun profile model.pte --top 10 --trace trace.json
    pterun profile model.pte --device cuda --iterations 50 --json
    ```
    """
    path = program or example_program()
    with reported():
        device = device_option(device)
        where = input_device(device)
        with progress.steps() as shown:
            with shown.step(f"loading {esc(path.name)}"):
                loaded = traced.runtime().load_program(path, data_path=data or None, device=device,
                                                       enable_etdump=True)
                method = method or default_method(loaded)
                m = loaded.load_method(method)
            args = traced.method_inputs(m.metadata, inputs, where, seed, program=loaded, method=method)
            traced.recorded(loaded)  # a language model's metadata methods, run to choose its inputs, are left out
            _run(m, args.values, warmup, iterations, loaded, where, shown.counted("profiling", warmup + iterations))
        blocks, dump, _ = traced.recorded(loaded)
        result = profile_rows(blocks, m.metadata.instructions())
        if result.runs != iterations:
            raise UserError(f"the ETDump holds {result.runs} runs of {method!r}; expected {iterations}")
        if etdump is not None:
            _write(etdump, dump, "--etdump")
        if trace is not None:
            extra = {"device": where, "runs": iterations, "warmup": warmup, "inputs": args.source}
            document = chrome_trace(blocks, m.metadata.instructions(), program=path.name, method=method, extra=extra)
            _write(trace, json.dumps(document).encode(), "--trace")
    rows = result.limited(top)
    if as_json:
        print(json.dumps(_as_json(result, rows, path, method, where, warmup, args)))
        return
    _table(result, rows, title=f"{esc(path.name)} :: {esc(method)} on {esc(where)}",
           caption=f"{iterations} runs after {warmup} warm-up; inputs {esc(args.source)}")
    note = language_model_note(loaded, path)
    if note is not None:
        console.print(note, highlight=False, soft_wrap=True)
    if trace is not None:
        console.print(f"trace: {esc(trace)} (open it in ui.perfetto.dev or chrome://tracing)")


def _run(method, args: list, warmup: int, iterations: int, program, where: str, advance) -> None:
    sync = torch.cuda.synchronize if where.startswith("cuda") else (lambda: None)
    for i in range(warmup + iterations):
        method.execute(args)
        sync()
        if i + 1 == warmup:
            traced.recorded(program)  # the warm-up runs (and the load) are left out
        advance()


def _write(path: Path, data: bytes, option: str) -> None:
    try:
        path.write_bytes(data)
    except OSError as exc:
        raise UserError(f"{option} {str(path)!r}: cannot write it ({exc.strerror or exc})") from None


def _as_json(result: Profile, rows, path: Path, method: str, where: str, warmup: int, args) -> dict:
    return {
        "program": str(path), "method": method, "device": where, "runs": result.runs, "warmup": warmup,
        "inputs": args.source, "method_total_ms": result.method_ns / 1e6, "explained_share": result.explained(rows),
        "rows": [{"name": r.name, "kind": r.kind, "delegate": r.parent, "count": r.count,
                  "total_ms": r.total_ns / 1e6, "mean_ms": r.mean_ns / 1e6, "share": result.share(r)} for r in rows],
    }


def _table(result: Profile, rows, *, title: str, caption: str) -> None:
    per_run = result.method_ns / result.runs if result.runs else 0
    table = Table(title=title, caption=caption, show_footer=True)
    table.add_column("operator", footer="method (Method::execute)")
    table.add_column("count", justify="right", footer=str(result.runs))
    table.add_column("total ms", justify="right", footer=f"{result.method_ns / 1e6:.3f}")
    table.add_column("mean µs", justify="right", footer=f"{per_run / 1e3:.1f}")
    table.add_column("share", justify="right", footer=f"listed {result.explained(rows):.1%}")
    for r in rows:
        if r.parent is not None:
            name, style = f"  └ {esc(r.name)}", "dim"
        else:
            name, style = esc(r.name) + (" [italic](delegate)[/italic]" if r.kind == "delegate" else ""), None
        table.add_row(name, str(r.count), f"{r.total_ns / 1e6:.3f}", f"{r.mean_ns / 1e3:.1f}",
                      f"{result.share(r):.1%}", style=style)
    console.print(table)
    left = len(result.top_level) - len([r for r in rows if r.parent is None])
    if left:
        console.print(f"{left} more operator(s) not listed (--top)")
