"""`pterun batch`: a program run over a whole dataset by Ray Data actors, written to Parquet (docs/batch.md)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer

from pterun import Runtime
from pterun.cli.options import DataFiles, DeviceName, ProgramPath, device_option, example_program, input_device
from pterun.cli.report import UserError, console, esc, reported
from pterun.errors import PteError


def batch(
    program: ProgramPath = None,
    input: Path = typer.Option(..., "--input", "-i", help="Parquet file or folder, .npy/.npz, or a folder of images."),
    output: Path = typer.Option(..., "--output", "-o", help="Folder the Parquet files are written to."),
    method: str = typer.Option("forward", "--method", "-m", help="The method to run on each row."),
    data: DataFiles = None,
    device: DeviceName = None,
    workers: Optional[int] = typer.Option(None, "--workers", "-w", min=1,
                                          help="Actors, each loading the program once (default: CPUs, or GPUs)."),
    batch_size: int = typer.Option(64, "--batch-size", "-b", min=1, help="Rows handed to an actor at a time."),
    address: Optional[str] = typer.Option(None, "--address", help="Join this Ray cluster (ray://...) instead "
                                                                  "of starting a local one."),
    preserve_order: bool = typer.Option(False, "--preserve-order", help="Write the rows in the input's order."),
    on_error: str = typer.Option("raise", "--on-error", help="raise: stop at a bad row; record: write its "
                                                             "message to an error column."),
    compare_with: Optional[str] = typer.Option(
        None, "--compare-with", help="'module:function' returning the eager nn.Module: adds max_abs_error and "
                                     "agrees columns and prints their distribution."),
    compile: bool = typer.Option(False, "--compile", help="torch.compile each method in each actor."),
) -> None:
    """Run a method over every row of a dataset with Ray Data and write the outputs as Parquet.

    **Examples**

    ```
    pterun batch --input tokens.npy --output out/
    pterun batch model.pte -i images/ -o out/ --device cuda --workers 2
    pterun batch model.pte -i rows.parquet -o out/ --compare-with pkg.mod:make
    ```
    """
    # Ray's workers read and write files from their own working directory: relative paths are made the
    # caller's here.
    path = (program or example_program()).resolve()
    input, output = input.resolve(), output.resolve()
    data = [p.resolve() for p in data] if data else None
    with reported():
        if on_error not in ("raise", "record"):
            raise UserError(f"--on-error {on_error!r}: expected raise or record")
        if address is None:
            device_option(device)  # a remote cluster's GPUs are not this machine's
        if output.exists() and (not output.is_dir() or any(output.iterdir())):
            raise UserError(f"--output {output}: exists and is not an empty folder")
        try:
            import ray

            from pterun.ray import PteRunner
            from pterun.ray.sources import read_input
        except ImportError as error:
            raise UserError(f"pterun batch needs Ray Data: pip install 'pterun[ray]' ({error})") from None
        meta = Runtime.get().load_program(path, data_path=data or None).metadata(method)
        image = _image_format(meta)
        started = _start_ray(ray, address)
        try:
            on = input_device(device)
            cuda = on.startswith("cuda")
            if workers is None:
                workers = max(1, int(ray.cluster_resources().get("GPU" if cuda else "CPU", 1)))
            # A remote cluster may not see this machine's files: the bytes travel through the object store.
            ship = (lambda p: ray.put(p.read_bytes())) if address else str
            runner = {"program": ship(path), "method": method, "device": on,
                      "data": [ship(p) for p in data] if data else None, "on_error": on_error,
                      "compare_with": compare_with, "compile": compile}
            start = time.perf_counter()
            dataset = read_input(input, rows_per_block=batch_size, image=image)
            # The dataset's own copy of Ray Data's settings; the process's stay as they were.
            dataset.context.execution_options.preserve_order = preserve_order
            dataset.context.raise_original_map_exception = True  # the pterun error itself, not Ray's wrapper
            dataset = dataset.map_batches(PteRunner, fn_constructor_kwargs=runner, batch_size=batch_size,
                                          compute=ray.data.ActorPoolStrategy(size=workers),
                                          num_gpus=1 if cuda else None, batch_format="numpy")
            try:
                dataset.write_parquet(str(output))
            except Exception as error:  # noqa: BLE001 - Ray's wrapper; the pterun error inside says what failed
                raise _cause(error) from None
            seconds = time.perf_counter() - start
        finally:
            if started:  # a local cluster of our own: stopped with the command
                ray.shutdown()
        _summary(output, seconds, on_error == "record", compare_with is not None)


def _image_format(meta):
    """How an image feeds the method's first input, where that input is one image per row."""
    from pterun.core.dtype import storage_dtype
    from pterun.ray.layout import numpy_dtype
    from pterun.ray.sources import ImageFormat

    if meta.num_inputs() == 0 or meta.input_tag(0) != "Tensor":
        return None
    info = meta.input_tensor_meta(0)
    sizes = tuple(info.sizes())
    if len(sizes) not in (3, 4):
        return None
    return ImageFormat(sizes[-3:], str(numpy_dtype(storage_dtype(info.dtype()))))


def _start_ray(ray, address: str | None) -> bool:
    """Connects to Ray (``address``, else a new local cluster); False when this process already was."""
    if ray.is_initialized():
        return False
    import logging

    ray.init(address=address, include_dashboard=False, logging_level=logging.WARNING,
             **({} if address else {"num_gpus": _local_gpus()}))
    return True


def _local_gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _cause(error: BaseException) -> BaseException:
    """The pterun error (or user error) behind Ray's wrapping of a failed task, else a one-line report."""
    current, seen = error, set()
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        inner = getattr(current, "cause", None)  # a RayTaskError holds the task's exception
        if isinstance(inner, BaseException):
            current = inner
            continue
        if isinstance(current, (PteError, UserError)):
            return current
        current = current.__cause__ or current.__context__
    lines = str(error).strip().splitlines()
    return UserError(f"the Ray job failed: {lines[-1] if lines else repr(error)}")


def _summary(output: Path, seconds: float, recorded: bool, compared: bool) -> None:
    import numpy as np
    import pyarrow.parquet as pq

    files = sorted(output.rglob("*.parquet"))
    rows = sum(pq.read_metadata(f).num_rows for f in files)
    columns = (["error"] if recorded else []) + (["max_abs_error", "agrees"] if compared else [])
    if columns:
        table = pq.read_table(files, columns=columns) if files else None
        if recorded and table is not None:
            failed = table.column("error").drop_null()
            console.print(f"{len(failed):,} rows failed (their messages are in the error column)"
                          + (f"; first: {esc(failed[0].as_py())}" if len(failed) else ""))
        if compared and table is not None:
            error = table.column("max_abs_error").to_numpy(zero_copy_only=False)
            agrees = table.column("agrees").to_numpy(zero_copy_only=False)
            ran = ~np.isnan(error)
            if ran.any():
                q = np.quantile(error[ran], [0.5, 0.9, 0.99, 1.0])
                console.print(f"max_abs_error p50 {q[0]:.3g}  p90 {q[1]:.3g}  p99 {q[2]:.3g}  max {q[3]:.3g}")
            console.print(f"agrees: {int(agrees.sum()):,} of {int(ran.sum()):,} rows ({agrees[ran].mean():.2%})"
                          if ran.any() else "agrees: no row ran")
    console.print(f"{rows:,} rows in {seconds:.2f} s: {rows / seconds:,.1f} rows/s → {esc(output)}")
