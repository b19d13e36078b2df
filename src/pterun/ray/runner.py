"""PteRunner: a Ray Data callable class that runs one method of a program over a dataset's batches.

    ds.map_batches(PteRunner, fn_constructor_kwargs={"program": "model.pte"}, batch_size=64, concurrency=2)

Ray makes one PteRunner per actor, so the program is loaded once per actor and every batch the actor
is given runs on the same loaded method (docs/batch.md).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import ray
import torch

from pterun.core.dtype import storage_dtype
from pterun.errors import InvalidArgument, InvalidArgumentType, NotSupported, PteError
from pterun.ray.compare import Comparison
from pterun.ray.layout import Column, Layout, numpy_dtype
from pterun.runtime import Runtime

ERROR_COLUMN = "error"


def resolve(source):
    """A program or data file as ``load_program`` takes it: a path, bytes, or bytes held in Ray's object store."""
    if isinstance(source, ray.ObjectRef):
        return ray.get(source)
    if isinstance(source, (list, tuple)):
        return [resolve(s) for s in source]
    return source


class PteRunner:
    """Runs ``method`` of ``program`` on each batch (a dict of NumPy columns) and returns its outputs as columns.

    ``program`` and ``data`` (.ptd files) are paths, bytes, or ``ray.put`` references to bytes.
    ``inputs`` maps the method's tensor inputs to columns: ``None`` takes the batch's columns in order
    (the index column left out), a list names one column per input, a dict maps input index to column.
    Outputs are the columns ``outputs`` names (default ``output_0``, ``output_1``, ...), with the
    program's dtypes (bfloat16 as float32); the batch's other columns pass through, its input columns
    only with ``keep_inputs``. ``on_error="record"`` gives a bad row NaN (or zero) outputs and its message
    in an ``error`` column instead of failing the job. ``compare_with`` (``"module:function"`` returning
    an ``nn.Module``) adds ``max_abs_error`` and ``agrees`` columns: the eager model on the same rows.
    ``device``, ``compile``, ``cuda_graphs``, ``allow_tf32`` and ``num_threads`` are ``load_program``'s.
    """

    def __init__(
        self,
        program,
        method: str = "forward",
        *,
        device: str = "cpu",
        data=None,
        inputs: Mapping[int, str] | Sequence[str] | None = None,
        outputs: Sequence[str] | None = None,
        index_column: str | None = "row",
        keep_inputs: bool = False,
        on_error: str = "raise",
        compare_with: str | None = None,
        compile: bool = False,
        cuda_graphs: bool = True,
        allow_tf32: bool = False,
        num_threads: int | None = None,
        _test_dir: str | None = None,
        _exit_on_batch: int | None = None,
        _wait_for_actors: int = 0,
    ) -> None:
        if on_error not in ("raise", "record"):
            raise InvalidArgument(f"on_error={on_error!r}: expected 'raise' or 'record'")
        self.device = torch.device(device)
        loaded = Runtime.get().load_program(
            resolve(program), data_path=resolve(data), device=None if self.device.type == "cpu" else device,
            compile=compile, cuda_graphs=cuda_graphs, allow_tf32=allow_tf32, num_threads=num_threads,
        )
        self.method = loaded.load_method(method)
        meta = self.method.metadata
        for j in range(meta.num_outputs()):
            if meta.output_tag(j) != "Tensor":
                raise NotSupported(f"method {method!r}: output {j} is a {meta.output_tag(j)}, not a tensor; "
                                   f"only tensors become columns")
        n_out = meta.num_outputs()
        self.output_names = list(outputs) if outputs is not None else [f"output_{j}" for j in range(n_out)]
        if len(self.output_names) != n_out:
            raise InvalidArgument(f"method {method!r} has {n_out} outputs; outputs= names {len(self.output_names)}")
        self.output_dtypes = [numpy_dtype(storage_dtype(meta.output_tensor_meta(j).dtype())) for j in range(n_out)]
        self.layout = Layout(meta, inputs, index_column)
        self.index_column = index_column
        self.keep_inputs = keep_inputs
        self.record = on_error == "record"
        self.comparison = Comparison(compare_with, self.device) if compare_with else None
        self._batches = 0
        self._test_dir = _test_dir
        self._exit_on_batch = _exit_on_batch
        self._wait_for_actors = _wait_for_actors
        if _test_dir:  # test-only: each actor (and each restart) leaves a mark
            Path(_test_dir, f"actor-{os.getpid()}-{time.monotonic_ns()}").touch()

    def __call__(self, batch) -> dict[str, np.ndarray]:
        """One batch (a dict of NumPy columns, or a pandas DataFrame) in, its output columns out."""
        self._batches += 1
        if self._test_dir:
            self._test_hook()
        batch = _numpy_batch(batch)
        n = len(next(iter(batch.values()))) if batch else 0
        if self.layout.inputs is None:
            if n == 0:
                return self._empty(batch)
            self.layout.bind(batch)
            clash = [name for name in self.output_names
                     if name in batch and (self.keep_inputs or name not in self._inputs())]
            if clash:
                raise InvalidArgument(f"output column {clash[0]!r} is also a column of the batch; name the "
                                      f"outputs with outputs=[...]")
        used = self._inputs()
        columns = {name: Column(batch[name]) for name in used}
        index = batch.get(self.index_column) if self.index_column else None

        def row_name(r: int) -> str:
            return str(index[r]) if index is not None else f"{r} of a batch of {n}"

        keys, bad = self.layout.check(columns, n, row_name)
        if bad and not self.record:
            raise bad[min(bad)]
        results: list[list] = [[None] * n for _ in self.output_names]
        compared: list = [None] * n
        for rows in self.layout.calls(keys):
            self._run(columns, rows, results, compared, bad, row_name)
        out = {name: values for name, values in batch.items() if self.keep_inputs or name not in used}
        for j, name in enumerate(self.output_names):
            out[name] = _column(results[j], self.output_dtypes[j])
        if self.comparison is not None:
            out.update(self.comparison.columns(compared))
        if self.record:
            out[ERROR_COLUMN] = np.array([str(bad[r]) if r in bad else None for r in range(n)], dtype=object)
        return out

    def _inputs(self) -> set[str]:
        assert self.layout.inputs is not None  # bound at the first batch
        return {x.column for x in self.layout.inputs}

    def _test_hook(self) -> None:
        """Test-only: mark each batch with the actor's process; hold the first batch until the other actors
        are up (else the first actor ready may take every batch); die (once per job) on the chosen batch."""
        assert self._test_dir is not None  # the hook runs only in the tests that set it
        Path(self._test_dir, f"batch-{os.getpid()}-{self._batches}").touch()
        deadline = time.monotonic() + 60
        while (self._batches == 1 and len(list(Path(self._test_dir).glob("actor-*"))) < self._wait_for_actors
               and time.monotonic() < deadline):
            time.sleep(0.05)
        marker = Path(self._test_dir, "exited")
        if self._exit_on_batch == self._batches and not marker.exists():
            marker.touch()  # the restarted actor must get through the same batch
            os._exit(1)

    def _run(self, columns, rows: np.ndarray, results, compared, bad, row_name) -> None:
        try:
            args, fed = self.layout.arguments(columns, rows, self.device)
            outputs = self.method.execute(args)
        except PteError as error:
            where = (f"row {row_name(rows[0])}" if len(rows) == 1
                     else f"rows {row_name(rows[0])} to {row_name(rows[-1])}")
            if not self.record:
                raise type(error)(f"{where}: {error.message}") from error
            if len(rows) > 1:  # one row at a time, to find the row that fails
                for r in rows:
                    self._run(columns, np.array([r]), results, compared, bad, row_name)
            else:
                bad[int(rows[0])] = type(error)(f"{where}: {error.message}")
            return
        k = len(rows)
        host = []
        for j, tensor in enumerate(outputs):
            if self.layout.batched:
                if tensor.dim() == 0 or tensor.shape[0] != fed:
                    raise NotSupported(f"output {j} has shape {list(tensor.shape)}: its first dimension is not the "
                                       f"batch of {fed} rows")
                tensor = tensor[:k]
            else:
                tensor = tensor.unsqueeze(0)
            host.append(tensor.detach().to("cpu", torch.float32 if tensor.dtype == torch.bfloat16 else None))
            for i, r in enumerate(rows):
                results[j][r] = host[j][i].numpy()
        if self.comparison is not None:
            for r, row in zip(rows, self.comparison.rows(args, host, k, self.layout.batched)):
                compared[r] = row

    def _empty(self, batch) -> dict[str, np.ndarray]:
        out = dict(batch)
        for name, dtype in zip(self.output_names, self.output_dtypes):
            out[name] = np.empty(0, dtype)
        return out


def _numpy_batch(batch) -> dict[str, np.ndarray]:
    if isinstance(batch, Mapping):
        return {name: np.asarray(values) if not isinstance(values, np.ndarray) else values
                for name, values in batch.items()}
    if hasattr(batch, "to_numpy") and hasattr(batch, "columns"):  # a pandas DataFrame
        return {name: batch[name].to_numpy() for name in batch.columns}
    raise InvalidArgumentType(f"PteRunner takes batches of NumPy columns (batch_format='numpy'), "
                              f"got a {type(batch).__name__}")


def _column(rows: list, dtype: np.dtype) -> np.ndarray:
    """Rows of one output as a column: one ndarray when they share a shape, else an array of ndarrays.
    A row without a value (its error recorded) is NaN, or zero where the dtype has no NaN."""
    shapes = {row.shape for row in rows if row is not None}
    fill = np.nan if np.issubdtype(dtype, np.floating) else 0
    if len(shapes) <= 1:
        shape = shapes.pop() if shapes else ()
        column = np.empty((len(rows),) + shape, dtype)
        for r, row in enumerate(rows):
            column[r] = fill if row is None else row
        return column
    rank = len(next(iter(shapes)))
    column = np.empty(len(rows), dtype=object)
    for r, row in enumerate(rows):
        column[r] = np.full((0,) * rank, fill, dtype) if row is None else row
    return column
