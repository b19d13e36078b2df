"""`pterun inspect`: what a program holds, per method: inputs and outputs (dtypes, sizes, dynamic bounds),
operators, delegates counted per backend, and the memory plan drawn (memory_plan.py); ``--json`` the same
for machines (the document is described in docs/inspect.md)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from pterun import MethodMeta, Runtime, TensorInfo
from pterun.cli.memory_plan import ArenaSummary, largest, picture, plot, summarise, summary_line, tensor_name
from pterun.cli.options import DataFiles, ProgramPath, TrustNativeCode, example_program
from pterun.cli.report import console, esc, reported, visible
from pterun.core.dtype import name as dtype_name
from pterun.kernels import fused
from pterun.kernels.llm import attention

SCHEMA = "pterun.inspect/1"


def inspect(
    program: ProgramPath = None,
    code: bool = typer.Option(
        False, "--code", help="Also print the Python each method compiles into, and its threads."
    ),
    data: DataFiles = None,
    plot_path: Optional[Path] = typer.Option(
        None, "--plot", help="Also draw the memory plan into this .svg or .png file (needs matplotlib)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON document instead (docs/inspect.md)."),
    trust_native_code: TrustNativeCode = False,
) -> None:
    """Show a program's methods, inputs, outputs, operators, delegates and memory plan.

    **Examples**

    ```
    pterun inspect model.pte
    pterun inspect --plot plan.png
    pterun inspect model.pte --json
    ```
    """
    path = program or example_program()
    with reported():
        loaded = Runtime.get().load_program(path, data_path=data or None, trust_native_code=trust_native_code)
        names = sorted(loaded.method_names)
        methods = []
        for name in names:
            meta = loaded.metadata(name)
            arenas = [summarise(a, meta.memory_planned_buffer_device(a.memory_id - 1)) for a in meta.memory_plan()]
            methods.append((meta, arenas))
        drawn = plot(plot_path, methods) if plot_path is not None else None
        if as_json:
            print(json.dumps(document(path, methods), indent=1))
            return
        console.print(f"[bold]{esc(path)}[/bold]  {path.stat().st_size:,} bytes  methods: "
                      f"{', '.join(esc(n) for n in names)}")
        for meta, arenas in methods:
            _show_method(meta, arenas)
            if code:
                method = loaded.load_method(meta.name())
                console.print(f"intra-op threads per call: {method.num_threads} ({esc(method.num_threads_reason)})")
                _show_routes(method)
                if any(op.split(".")[0] in attention.OPERATORS for op in meta.operators()):
                    console.print(f"attention over a KV cache (float32, CPU): {esc(attention.route())}",
                                  highlight=False)
                if any(getattr(s, "name", "") in fused.FUSED_ON_THE_CPU for s in method.steps):
                    console.print(f"fused RMSNorm and rotary (float32, CPU): {esc(fused.route())}", highlight=False)
                # Generated from the file's names: printed as text, control characters made visible.
                console.print(visible(method.source, lines=True), highlight=False, markup=False)
        if drawn is not None:
            console.print(f"memory plan drawn in {esc(plot_path)} ({drawn} tensors)")


def _show_routes(method) -> None:
    """How each delegate's quantized products compute on this CPU (XNNPACK delegates say; others do not)."""
    for i, handle in enumerate(method.delegate_handles):
        routes = getattr(handle, "routes", None)
        if not routes:
            continue
        console.print(f"delegate {i}: {esc(handle.cpu)}", highlight=False)
        for where, how in routes:
            console.print(f"  {esc(where)}: {esc(how)}", highlight=False)


def _sizes(info: TensorInfo) -> str:
    sizes = str(list(info.sizes()))
    return sizes if info.dynamism() == "static" else f"≤ {sizes}"


def _io(meta: MethodMeta, which: str) -> list[tuple[TensorInfo | None, str]]:
    """Per input or output: its tensor (None for another kind of value) and its kind as ExecuTorch names it."""
    if which == "input":
        count, tag, tensor = meta.num_inputs(), meta.input_tag, meta.input_tensor_meta
    else:
        count, tag, tensor = meta.num_outputs(), meta.output_tag, meta.output_tensor_meta
    return [(tensor(i) if tag(i) == "Tensor" else None, tag(i)) for i in range(count)]


def _io_rows(table: Table, meta: MethodMeta, which: str) -> None:
    for i, (info, tag) in enumerate(_io(meta, which)):
        if info is not None:
            table.add_row(f"{which} {i}", dtype_name(info.dtype()), _sizes(info), str(list(info.dim_order())),
                          "planned" if info.is_memory_planned() else "caller's memory", f"{info.nbytes():,}")
        else:
            table.add_row(f"{which} {i}", esc(tag), "", "", "", "")


def delegate_counts(meta: MethodMeta) -> dict[str, int]:
    """Delegates per backend, in the order the method first calls each."""
    return dict(Counter(meta.get_backend_name(i) for i in range(meta.num_backends())))


def _show_method(meta: MethodMeta, arenas: list[ArenaSummary]) -> None:
    console.rule(f"method {esc(meta.name())}")
    table = Table(show_edge=False)
    for column in ("value", "dtype", "sizes", "dim order", "memory", "bytes"):
        table.add_column(column)
    _io_rows(table, meta, "input")
    _io_rows(table, meta, "output")
    console.print(table)
    if any(info is not None and info.dynamism() != "static"
           for which in ("input", "output") for info, _ in _io(meta, which)):
        console.print("≤: a dynamic shape; the sizes are its upper bound", style="dim")
    counts = delegate_counts(meta)
    console.print(f"delegates: {', '.join(f'{esc(b)} ×{n}' for b, n in counts.items()) or 'none'}")
    ops = [esc(op) for op in meta.operators()]
    console.print(f"instructions: {meta.num_instructions()}  operators ({len(ops)}): {', '.join(ops)}")
    if not arenas:
        console.print("memory arenas: none")
    for s in arenas:
        console.print(f"memory {esc(summary_line(s))}")
        if s.arena.tensors:
            console.print(picture(s, console.width))
            big = ", ".join(f"{esc(tensor_name(meta, t))} ({t.role}, {t.nbytes:,} bytes at {t.offset:,}, "
                            f"instructions {t.first}–{t.last})" for t in largest(s.arena, 3) if t.first is not None)
            console.print(f"largest: {big}", style="dim")


def _tensor_doc(info: TensorInfo | None, tag: str) -> dict:
    if info is None:
        return {"kind": tag}
    return {"kind": "Tensor", "dtype": dtype_name(info.dtype()), "sizes": list(info.sizes()),
            "dim_order": list(info.dim_order()), "dynamism": info.dynamism(),
            "planned": info.is_memory_planned(), "nbytes": info.nbytes()}


def document(path: Path, methods: list[tuple[MethodMeta, list[ArenaSummary]]]) -> dict:
    """The JSON document of ``pterun inspect --json`` (its keys are described in docs/inspect.md)."""
    return {
        "schema": SCHEMA,
        "program": {"path": str(path), "bytes": path.stat().st_size},
        "methods": [{
            "name": meta.name(),
            "inputs": [_tensor_doc(*io) for io in _io(meta, "input")],
            "outputs": [_tensor_doc(*io) for io in _io(meta, "output")],
            "instructions": meta.num_instructions(),
            "operators": meta.operators(),
            "delegates": delegate_counts(meta),
            "arenas": [{
                "memory_id": s.arena.memory_id, "size": s.arena.size, "device": s.device,
                "peak_live_bytes": s.peak, "peak_instruction": s.peak_at,
                "unshared_bytes": s.arena.unshared_bytes, "saved_bytes": s.saved,
                "tensors": [{"value": t.value, "name": tensor_name(meta, t), "role": t.role, "offset": t.offset,
                             "nbytes": t.nbytes, "first": t.first, "last": t.last} for t in s.arena.tensors],
            } for s in arenas],
        } for meta, arenas in methods],
    }
