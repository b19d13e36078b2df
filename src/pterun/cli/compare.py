"""`pterun compare`: pterun's outputs (and with an ETRecord, every operator's value) beside a reference's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import torch
import typer
from rich.table import Table
from torch.utils._pytree import tree_leaves

from pterun import MethodMeta
from pterun.cli import traced
from pterun.cli.numerics import Gap, first_over, fmt, gap
from pterun.cli.options import DataFiles, DeviceName, ProgramPath, device_option, example_program, input_device
from pterun.cli.report import UserError, console, esc, reported
from pterun.errors import MemoryAllocationFailed

AGAINST = ("executorch", "etrecord")
GROWTHS = 5  # tries with a debug buffer 4 times larger each time, when delegates compute more than estimated


def compare(
    program: ProgramPath = None,
    method: str = typer.Option("forward", "--method", "-m", help="The method to run."),
    against: Optional[str] = typer.Option(
        None, "--against", help="The reference for the outputs: executorch (ExecuTorch's runtime) or etrecord (the "
                                "ETRecord's exported program in eager PyTorch); etrecord when --etrecord is given, "
                                "else executorch."
    ),
    etrecord: Optional[Path] = typer.Option(
        None, "--etrecord", help="The ETRecord written at export: compares every operator's value with the graph's."
    ),
    data: DataFiles = None,
    inputs: Optional[Path] = typer.Option(
        None, "--inputs", "-i", help=".pt or .npz file of inputs; else the ETRecord's representative inputs, else "
                                     "random ones."
    ),
    device: DeviceName = None,
    seed: int = typer.Option(0, "--seed", help="Seed of the random inputs."),
    threshold: float = typer.Option(
        1e-3, "--threshold", min=0.0, help="A row is over when its relative error (max abs ÷ the reference's "
                                           "largest magnitude) is above this."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the comparison as JSON."),
) -> None:
    """Run a program on pterun and on a reference, and show how far apart their values are.

    **Examples**

    ```
    pterun compare
    pterun compare model.pte --etrecord etrecord.bin
    pterun compare model.pte --device cuda --threshold 1e-2 --json
    ```
    """
    path = program or example_program()
    with reported():
        device = device_option(device)
        where = input_device(device)
        against = against or ("etrecord" if etrecord else "executorch")
        if against not in AGAINST:
            raise UserError(f"--against: unknown reference {against!r}; expected executorch or etrecord")
        if against == "etrecord" and etrecord is None:
            raise UserError("--against etrecord needs --etrecord FILE")
        record = None
        if etrecord is not None:
            from pterun.cli.reference import FORWARD, Record

            if method != FORWARD:
                raise UserError(f"--etrecord: ExecuTorch's Inspector reads method {FORWARD!r} only, not {method!r}")
            record = Record(etrecord)
        meta = traced.runtime().load_program(path).metadata(method)
        values, source = _inputs(meta, record, inputs, where, seed)
        outputs, pairs = _run_pterun(path, data, method, device, values, record, meta)
        if against == "executorch":
            from pterun.cli.reference import executorch_outputs

            reference = executorch_outputs(path, data or [], method, [_copy(v) for v in values])
        else:
            assert record is not None  # --against etrecord reads the ETRecord --etrecord names
            reference = record.outputs(values)
        output_gaps = _output_gaps(outputs, reference)
        operator_gaps = [gap(p.value, p.reference, judged=not p.by_position) for p in pairs]
    title = f"{esc(path.name)} :: {esc(method)}, pterun on {esc(where)} against {against}"
    if as_json:
        print(json.dumps(_as_json(path, method, against, source, threshold, outputs, output_gaps, pairs,
                                  operator_gaps)))
        return
    console.print(f"inputs: {esc(source)}; threshold: relative error {threshold:g}")
    _outputs_table(outputs, output_gaps, threshold, title)
    if record is not None:
        _operators_table(pairs, operator_gaps, threshold, f"{esc(path.name)} :: {esc(method)}, every operator "
                                                          f"against the ETRecord's graph")


def _copy(value):
    return value.clone() if isinstance(value, torch.Tensor) else value


def _inputs(meta: MethodMeta, record, inputs: Path | None, where: str, seed: int) -> tuple[list, str]:
    """The inputs and where they came from: --inputs, else the ETRecord's, else random ones."""
    if inputs is None and record is not None and record.inputs is not None:
        values = [x.to(where) if isinstance(x, torch.Tensor) else x for x in record.inputs]
        source = "the ETRecord's representative inputs"
    else:
        chosen = traced.method_inputs(meta, inputs, where, seed)
        values, source = chosen.values, chosen.source
    if record is not None:
        record.use_inputs(values)
    return values, source


def _run_pterun(path: Path, data, method: str, device, values: list, record, meta: MethodMeta):
    """The method's outputs on pterun (on the host), and with an ETRecord every operator's value paired with
    the reference graph's."""
    first = traced.debug_buffer_estimate(meta) if record is not None else 0
    for size in (first * 4**i for i in range(GROWTHS)):
        loaded = traced.runtime().load_program(path, data_path=data or None, device=device,
                                               enable_etdump=record is not None, debug_buffer_size=size)
        m = loaded.load_method(method)
        try:
            outputs = [o.cpu() if isinstance(o, torch.Tensor) else o for o in m.execute([_copy(v) for v in values])]
        except MemoryAllocationFailed:
            if record is None:
                raise
            continue  # the debug buffer was too small for what delegates compute inside
        if record is None:
            return outputs, []
        _, dump, debug = traced.recorded(loaded, keep_debug=True)
        return outputs, record.pairs(dump, debug or b"")
    raise UserError(f"the intermediate values of {method!r} do not fit in a debug buffer of {size:,} bytes")


def _output_gaps(outputs: list, reference: list) -> list[Gap]:
    reference = list(tree_leaves(reference))
    gaps = [gap(o, r) for o, r in zip(outputs, reference)]
    if len(outputs) != len(reference):
        gaps += [Gap(float("nan"), float("nan"), float("nan"), "missing")] * abs(len(outputs) - len(reference))
    return gaps


def _describe(value) -> tuple[str, str]:
    if isinstance(value, torch.Tensor):
        return str(value.dtype).removeprefix("torch."), str(list(value.shape))
    return type(value).__name__, ""


def _cells(g: Gap) -> list[str]:
    if g.problem:
        return ["-", "-", "-"]
    return [fmt(g.max_abs), fmt(g.relative), fmt(g.snr_db, ".1f")]


def _mark(g: Gap, i: int, first: int | None, threshold: float) -> tuple[str, str | None]:
    """The last cell and the row's style: the first row over the threshold stands out."""
    if not g.judged:
        return "?", "dim"
    if i == first:
        return "◀ first", "bold red"
    if g.over(threshold):
        return "over", "red"
    return "ok", None


def _problems(gaps: list[Gap], what: str) -> None:
    for i, g in enumerate(gaps):
        if g.problem:
            console.print(f"{what} {i}: {esc(g.problem)}")


def _names(names: list[str]) -> str:
    """A row's graph nodes: the first, and how many more (--json lists them all)."""
    return names[0] + (f" +{len(names) - 1}" if len(names) > 1 else "") if names else "?"


def _outputs_table(outputs: list, gaps: list[Gap], threshold: float, title: str) -> None:
    table = Table(title=title)
    for column in ("output", "dtype", "shape", "max abs", "relative", "SNR dB", ""):
        table.add_column(column, justify="right" if column in ("max abs", "relative", "SNR dB") else "left")
    first = first_over(gaps, threshold)
    for i, g in enumerate(gaps):
        dtype, shape = _describe(outputs[i]) if i < len(outputs) else ("", "")
        mark, style = _mark(g, i, first, threshold)
        table.add_row(str(i), dtype, shape, *_cells(g), mark, style=style)
    console.print(table)
    _problems(gaps, "output")


def _operators_table(pairs, gaps: list[Gap], threshold: float, title: str) -> None:
    delegates = sorted({p.delegate for p in pairs if p.delegate is not None})
    caption = f"└ a node inside a delegate ({esc(', '.join(delegates))})" if delegates else None
    table = Table(title=title, caption=caption)
    for column in ("#", "operator", "runtime", "handles", "max abs", "relative", "SNR dB", ""):
        table.add_column(column, justify="right" if column in ("#", "max abs", "relative", "SNR dB") else "left",
                         no_wrap=column not in ("operator", "runtime"))
    first = first_over(gaps, threshold)
    for i, (p, g) in enumerate(zip(pairs, gaps)):
        name = esc(p.runtime_name.removeprefix("native_call_"))
        runtime = name if p.delegate is None else f"└ {name}"
        mark, style = _mark(g, i, first, threshold)
        table.add_row(str(i), esc(_names(p.reference_names)), runtime, _handles(p.handles), *_cells(g), mark,
                      style=style)
    console.print(table)
    _problems(gaps, "operator")
    if any(p.by_position for p in pairs):
        console.print("rows marked '?' are outputs of one delegate call paired with the graph's values by position "
                      "(as ExecuTorch's Inspector pairs them): they may be different values, and are not judged")
    if first is None:
        console.print(f"every operator is within relative error {threshold:g}")


def _handles(handles: tuple[int, ...]) -> str:
    if len(handles) > 2 and handles == tuple(range(handles[0], handles[-1] + 1)):
        return f"{handles[0]}–{handles[-1]}"
    return ", ".join(map(str, handles))


def _as_json(path, method, against, source, threshold, outputs, output_gaps, pairs, operator_gaps) -> dict:
    out = {
        "program": str(path), "method": method, "against": against, "inputs": source, "threshold": threshold,
        "outputs": [dict(index=i, dtype=_describe(outputs[i])[0] if i < len(outputs) else None,
                         shape=list(outputs[i].shape) if i < len(outputs) and isinstance(outputs[i], torch.Tensor)
                         else None, over=g.over(threshold), **g.as_dict()) for i, g in enumerate(output_gaps)],
        "first_output_over": first_over(output_gaps, threshold),
    }
    if pairs:
        out["operators"] = [dict(index=i, operator=p.reference_names, runtime=p.runtime_name, delegate=p.delegate,
                                 debug_handles=list(p.handles), over=g.over(threshold),
                                 paired_by_position=p.by_position, **g.as_dict())
                            for i, (p, g) in enumerate(zip(pairs, operator_gaps))]
        out["first_operator_over"] = first_over(operator_gaps, threshold)
    return out
