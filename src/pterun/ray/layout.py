"""How a batch's rows become calls of one method.

Each tensor input is fed by one column. A row whose rank is one less than the input's is one slice of
the input's first dimension, the batch: a call takes up to the planned batch of consecutive rows of
one shape (a static batch is filled by repeating the last row, and the outputs trimmed; a bounded
dynamic batch takes fewer). A row of the input's full rank is the whole input: one row per call.
Rows are checked before any call, so a bad one is named (its index column's value, or its place in
the batch) with the input and column it was meant for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from pterun import MethodMeta, TensorInfo
from pterun.core.dtype import name as dtype_name
from pterun.core.dtype import storage_dtype
from pterun.errors import InvalidArgument, NotSupported


@dataclass(frozen=True)
class Input:
    index: int  # the method's input
    column: str
    sizes: tuple[int, ...]  # the upper bound when dynamic
    static: bool
    scalar_type: int
    dtype: torch.dtype
    numpy: np.dtype


def numpy_dtype(dtype: torch.dtype) -> np.dtype:
    """The NumPy dtype of a torch dtype; bfloat16 (NumPy has none) is widened to float32."""
    return np.dtype(np.float32) if dtype == torch.bfloat16 else torch.empty((), dtype=dtype).numpy().dtype


def tensor_inputs(meta: MethodMeta) -> tuple[list[tuple[int, TensorInfo]], dict[int, object]]:
    """The method's tensor inputs, and the value every other input was exported with (the only one it takes)."""
    tensors: list[tuple[int, TensorInfo]] = []
    fixed: dict[int, object] = {}
    for i in range(meta.num_inputs()):
        tag = meta.input_tag(i)
        if tag == "Tensor":
            tensors.append((i, meta.input_tensor_meta(i)))
        elif tag.startswith("List"):
            raise NotSupported(f"method {meta.name()!r}: input {i} is a list ({tag}); a column can only feed a tensor")
        else:
            fixed[i] = meta.input_value(i)
    return tensors, fixed


def dense(value) -> np.ndarray:
    """A row as one ndarray (Ray hands nested lists from Parquet over as object arrays of arrays)."""
    value = np.asarray(value)
    if value.dtype == object and value.size:
        return np.stack([dense(v) for v in value])
    return value


def _dense_or_none(value) -> np.ndarray | None:
    try:
        return dense(value)
    except ValueError:  # ragged: not one array
        return None


class Column:
    """One input's column of a batch: one ndarray when its rows share a shape, else a list of rows."""

    def __init__(self, values) -> None:
        values = np.asarray(values) if not isinstance(values, np.ndarray) else values
        # One array of every row, or else each row on its own (None: a row of nested lists of different lengths).
        self.array: np.ndarray | None = None if values.dtype == object else values
        self.rows: list[np.ndarray | None] = [_dense_or_none(v) for v in values] if self.array is None else []

    def shape(self, row: int) -> tuple[int, ...] | None:
        """The row's shape; ``None`` for a row of nested lists of different lengths."""
        if self.array is not None:
            return self.array.shape[1:]
        value = self.rows[row]
        return None if value is None else value.shape

    def dtype(self, row: int) -> np.dtype | None:
        if self.array is not None:
            return self.array.dtype
        value = self.rows[row]
        return None if value is None else value.dtype

    def take(self, rows: np.ndarray, dtype: np.dtype) -> np.ndarray:
        if self.array is not None:
            return np.ascontiguousarray(self.array[rows], dtype=dtype)
        return np.stack([self.rows[r] for r in rows]).astype(dtype, copy=False)


class Layout:
    """A method's inputs bound to a batch's columns, and how many rows one call takes."""

    def __init__(self, meta: MethodMeta, mapping: Mapping[int, str] | Sequence[str] | None,
                 index_column: str | None) -> None:
        self.name = meta.name()
        self._tensors, self.fixed = tensor_inputs(meta)
        self._mapping = mapping
        self._index_column = index_column
        self.inputs: list[Input] | None = None  # bound at the first batch (columns by position)
        self.batched = True
        self.bound = 1
        self.pad = False

    def bind(self, batch: Mapping[str, np.ndarray]) -> None:
        """Chooses the columns (by the mapping, else by position) and whether rows are batch slices."""
        names = self._columns(list(batch))
        self.inputs = [
            Input(i, names[k], info.sizes(), info.dynamism() == "static", info.dtype(), storage_dtype(info.dtype()),
                  numpy_dtype(storage_dtype(info.dtype())))
            for k, (i, info) in enumerate(self._tensors)
        ]
        # Rows are batch slices unless a column's rows already have the input's full rank.
        first = [Column(batch[x.column][:1]).shape(0) for x in self.inputs]
        full = any(shape is not None and len(shape) == len(x.sizes) for shape, x in zip(first, self.inputs))
        self.batched = not full and all(x.sizes for x in self.inputs)
        if not self.batched:
            self.bound, self.pad = 1, False
            return
        static = [x for x in self.inputs if x.static]
        if len({x.sizes[0] for x in static}) > 1:
            found = ", ".join(f"input {x.index} {list(x.sizes)}" for x in static)
            raise NotSupported(f"method {self.name!r}: its static inputs plan different batches ({found})")
        self.bound = static[0].sizes[0] if static else min(x.sizes[0] for x in self.inputs)
        self.pad = bool(static)

    def _columns(self, columns: list[str]) -> list[str]:
        n = len(self._tensors)
        if isinstance(self._mapping, Mapping):
            by_input = dict(self._mapping)
            wanted = [i for i, _ in self._tensors]
            if sorted(by_input) != wanted:
                raise InvalidArgument(f"method {self.name!r}: inputs={by_input!r} must name a column for each "
                                      f"tensor input {wanted}")
            names = [by_input[i] for i in wanted]
        elif self._mapping is not None:
            names = list(self._mapping)
            if len(names) != n:
                raise InvalidArgument(f"method {self.name!r}: takes {n} tensor inputs, inputs= names {len(names)}")
        else:
            candidates = [c for c in columns if c != self._index_column]
            if len(candidates) < n:
                raise InvalidArgument(f"method {self.name!r}: takes {n} tensor inputs, the batch has "
                                      f"{len(candidates)} columns ({', '.join(candidates)})")
            names = candidates[:n]
        missing = [c for c in names if c not in columns]
        if missing:
            raise InvalidArgument(f"method {self.name!r}: no column {missing[0]!r} in the batch "
                                  f"(columns: {', '.join(columns)})")
        return names

    def check(self, columns: dict[str, Column], n: int, row_name) -> tuple[list, dict[int, Exception]]:
        """Each row's shapes (a tuple per row, ``None`` for a bad row) and each bad row's error."""
        inputs = self.inputs
        assert inputs is not None, "the columns are bound at the first batch (bind)"
        # A column that is one ndarray has one shape and dtype: judged once, for all its rows.
        once = {x.index: self._problem(x, columns[x.column].shape(0), columns[x.column].dtype(0))
                for x in inputs if columns[x.column].array is not None}
        keys: list = [None] * n
        bad: dict[int, Exception] = {}
        for r in range(n):
            key = []
            for x in inputs:
                column = columns[x.column]
                shape = column.shape(r)
                problem = once[x.index] if x.index in once else self._problem(x, shape, column.dtype(r))
                if problem is not None:
                    kind, message = problem
                    bad[r] = kind(f"row {row_name(r)}, input {x.index} (column {x.column!r}): {message}")
                    break
                key.append(shape)
            else:
                keys[r] = tuple(key)
        return keys, bad

    def _problem(self, x: Input, shape: tuple[int, ...] | None, dtype: np.dtype | None):
        sizes = x.sizes[1:] if self.batched else x.sizes
        if shape is None or dtype is None:  # both, or neither
            return InvalidArgument, "its values are nested lists of different lengths, not one array"
        if len(shape) != len(sizes):
            return NotSupported, (f"expected rows of shape {list(sizes)} ({len(sizes)} dimensions; the program's "
                                  f"input is {list(x.sizes)}), got shape {list(shape)}")
        if x.static and tuple(shape) != tuple(sizes):
            return NotSupported, f"expected shape {list(sizes)} (static), got {list(shape)}"
        if not x.static and any(s > b for s, b in zip(shape, sizes)):
            return NotSupported, f"shape {list(shape)} is past the upper bound {list(sizes)}"
        if not np.can_cast(dtype, x.numpy, "same_kind"):
            return InvalidArgument, (f"expected {dtype_name(x.scalar_type)} values, got {dtype} "
                                     f"(which does not cast to {x.numpy} within its kind)")
        return None

    def calls(self, keys: list) -> list[np.ndarray]:
        """The rows of each call: consecutive good rows of one shape, at most ``bound`` at a time."""
        calls: list[np.ndarray] = []
        run: list[int] = []
        last = None
        for r, key in enumerate(keys):
            if key is None:
                continue
            if run and (key != last or len(run) == self.bound):
                calls.append(np.array(run))
                run = []
            run.append(r)
            last = key
        if run:
            calls.append(np.array(run))
        return calls

    def arguments(self, columns: dict[str, Column], rows: np.ndarray, device: torch.device) -> tuple[list, int]:
        """A call's inputs for ``rows`` (stacked, cast, padded to a static batch, on the device) and its batch."""
        if self.pad and len(rows) < self.bound:
            rows = np.concatenate([rows, np.full(self.bound - len(rows), rows[-1])])
        inputs = self.inputs
        assert inputs is not None, "the columns are bound at the first batch (bind)"
        args: list = [None] * (len(self.fixed) + len(inputs))
        for i, value in self.fixed.items():
            args[i] = value
        for x in inputs:
            array = columns[x.column].take(rows, x.numpy)
            tensor = torch.from_numpy(array if self.batched else array[0])
            if tensor.dtype != x.dtype:  # bfloat16, carried as float32
                tensor = tensor.to(x.dtype)
            args[x.index] = tensor.to(device, non_blocking=True) if device.type != "cpu" else tensor
        return args, len(rows)


__all__ = ["Column", "Input", "Layout", "dense", "numpy_dtype", "tensor_inputs"]
