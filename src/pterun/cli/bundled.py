"""`pterun test`: run every test case of a bundled program (.bpte) and say which pass."""

from __future__ import annotations

import json
import math
from contextlib import nullcontext
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from pterun.bundled import DEFAULT_ATOL, DEFAULT_RTOL, BundledProgram, CaseResult
from pterun.cli.options import DataFiles
from pterun.cli.report import UserError, console, esc, reported


def run_tests(
    bundle: Path = typer.Argument(..., help="The bundled program (.bpte)."),
    method: Optional[list[str]] = typer.Option(None, "--method", "-m", help="Only this method's test cases."),
    data: DataFiles = None,
    rtol: float = typer.Option(DEFAULT_RTOL, "--rtol", min=0.0, help="Relative tolerance, as ExecuTorch's."),
    atol: float = typer.Option(DEFAULT_ATOL, "--atol", min=0.0, help="Absolute tolerance, as ExecuTorch's."),
    as_json: bool = typer.Option(False, "--json", help="Print the results as JSON."),
) -> None:
    """Run every bundled test case of every method; exit status 1 when any fails.

    **Examples**

    ```
    pterun test model.bpte
    pterun test model.bpte --method forward --rtol 1e-3 --atol 1e-5 --json
    ```
    """
    results: list[CaseResult] = []
    with reported():
        loaded = BundledProgram(bundle, data_path=data or None)
        names = list(loaded.method_names)
        for name in method or ():
            if name not in names:
                raise UserError(f"--method {name!r}: {bundle.name} has test cases for {', '.join(names) or 'none'}")
        names = [n for n in names if not method or n in method]
        _ = loaded.program  # a program that does not load is one error, not one per case
        total = sum(len(loaded.test_cases(n)) for n in names)
        with nullcontext() if as_json else console.status("") as status:
            for name in names:
                for index in range(len(loaded.test_cases(name))):
                    if status is not None:
                        status.update(f"{esc(name)} test case {index} ({len(results) + 1} of {total})")
                    results.append(loaded.check(name, index, rtol, atol))
    failed = sum(not r.passed for r in results)
    if as_json:
        print(json.dumps({"bundle": str(bundle), "rtol": rtol, "atol": atol, "passed": len(results) - failed,
                          "failed": failed, "cases": [_as_dict(r) for r in results]}))
    else:
        _show(bundle, results, rtol, atol)
    if failed:
        raise typer.Exit(1)


def _detail(result: CaseResult) -> str:
    if result.error is not None:
        return str(result.error)
    return "; ".join(f"output {o.index}: {o.detail}" for o in result.outputs if not o.ok)


def _show(bundle: Path, results: list[CaseResult], rtol: float, atol: float) -> None:
    table = Table(title=f"{esc(bundle.name)} (rtol {rtol:g}, atol {atol:g})")
    for column in ("method", "case", "result", "max abs error", "ms", "detail"):
        table.add_column(column, justify="right" if column in ("case", "max abs error", "ms") else "left")
    for r in results:
        error = r.max_abs_error
        table.add_row(esc(r.method), str(r.index), "[green]pass[/green]" if r.passed else "[bold red]FAIL[/bold red]",
                      "" if error is None else f"{error:.3g}", f"{r.seconds * 1e3:.1f}", esc(_detail(r)))
    console.print(table)
    failed = sum(not r.passed for r in results)
    colour = "red" if failed else "green"
    console.print(f"[{colour}]{len(results) - failed} passed, {failed} failed[/{colour}]")


def _as_dict(r: CaseResult) -> dict:
    return {
        "method": r.method, "index": r.index, "passed": r.passed, "max_abs_error": _number(r.max_abs_error),
        "seconds": r.seconds,
        "outputs": [{"index": o.index, "ok": o.ok, "max_abs_error": _number(o.max_abs_error),
                     "mismatched": o.mismatched, "numel": o.numel, "detail": o.detail} for o in r.outputs],
        "error": None if r.error is None else {"code": int(r.error.code), "name": r.error.code.name,
                                               "message": r.error.message},
    }


def _number(x: float | None) -> float | None:
    return x if x is None or math.isfinite(x) else None  # JSON has no NaN
