"""A method's values (EValues) read from the flatbuffer, every table of a kind at once (``flatbuf/bulk.py``).

Each value is checked as ``read_tensor`` always has: a tensor's scalar type,
sizes, dim order, byte count, dynamism, storage offset, data location and
device; errors name the value. Every element read is charged to the read
budget (``budget.py``).
"""

from __future__ import annotations

import math

import numpy as np

from pterun.enums import DEVICE_TYPE_CODES, ELEMENT_SIZE, DeviceType
from pterun.errors import InvalidProgram, NotSupported
from pterun.flatbuf.bulk import ABSENT, Bytes, Tables
from pterun.format._generated import program_generated as fb
from pterun.format._generated import program_layout as layout
from pterun.format.budget import charge, string
from pterun.format.plan import Dynamism, Kind, ListValue, Scalar, TensorSpec, Value

_MAX_NBYTES = 1 << 63
_KNOWN_DEVICE_TYPES = ", ".join(f"{t.value}: {t.name}" for t in DeviceType)
_TENSOR_LOCATIONS = (fb.TensorDataLocation.SEGMENT, fb.TensorDataLocation.EXTERNAL)
_DYNAMISM = tuple(Dynamism)
# Each list kind: its table, the element type of its items, and how an item becomes a value.
_LISTS = {
    Kind.INT_LIST: ("pte.IntList", "<i8", None),
    Kind.DOUBLE_LIST: ("pte.DoubleList", "<f8", float),
    Kind.BOOL_LIST: ("pte.BoolList", "<u1", bool),
    Kind.TENSOR_LIST: ("pte.TensorList", "<i4", None),
    Kind.OPTIONAL_TENSOR_LIST: ("pte.OptionalTensorList", "<i4", None),
}
# Each scalar kind: its table, its field and type, and how the field becomes the value.
_SCALARS = {
    Kind.INT: ("pte.Int", "int_val", "<i8", int),
    Kind.BOOL: ("pte.Bool", "bool_val", "<u1", bool),
    Kind.DOUBLE: ("pte.Double", "double_val", "<f8", float),
}
_CONTIGUOUS = tuple(tuple(range(n)) for n in range(17))
_NULL = Scalar(Kind.NULL, None)  # frozen: every null value of a plan can be this one
_KINDS = (Kind.INT, Kind.BOOL, Kind.DOUBLE, Kind.STRING, Kind.TENSOR, *_LISTS)  # all but NULL
_KIND_CODES = np.array(_KINDS)


def check_device(device_type: int, device_index: int, where: str) -> None:
    if device_type not in DEVICE_TYPE_CODES:
        raise NotSupported(f"{where}: device type {device_type} is not one this runtime knows ({_KNOWN_DEVICE_TYPES})")
    if device_index < 0:
        raise InvalidProgram(f"{where}: device index {device_index} is negative")


def read_values(data: Bytes, positions: np.ndarray, where: str) -> tuple[Value, ...]:
    """The values whose EValue tables lie at ``positions``."""
    charge(len(positions))
    ev = Tables(data, layout, "pte.EValue", positions)
    tags = ev.scalar("val_type", "<u1").astype(np.int64)
    members = ev.ref("val")
    null = (tags == Kind.NULL) | (tags == 0)
    # The first value of no kind this runtime knows, or of a kind but no data, fails the method.
    empty = ~null & (members == ABSENT)
    unknown = ~null & ~empty & ~np.isin(tags, _KIND_CODES)
    if empty.any() or unknown.any():
        i = int(np.argmax(empty | unknown))
        if empty[i]:
            raise InvalidProgram(f"{where} value {i}: value of kind {tags[i]} has no data")
        raise InvalidProgram(f"{where} value {i}: unknown value kind {tags[i]}")
    values: list = [_NULL] * len(tags)
    present = set(tags.tolist())
    for kind in _KINDS:
        if kind not in present:
            continue
        chosen = np.flatnonzero(tags == kind)
        made = _read_kind(data, kind, members[chosen], where)
        if kind == Kind.TENSOR:
            made = [_tensor(*fields, i, where) for fields, i in zip(made, chosen.tolist())]  # type: ignore[call-arg]
        for i, value in zip(chosen.tolist(), made):
            values[i] = value
    return tuple(values)


def _read_kind(data: Bytes, kind: Kind, at: np.ndarray, where: str) -> list:
    if kind in _SCALARS:
        table, field, dtype, convert = _SCALARS[kind]
        # Scalars are frozen: the values of one kind and value (the many 0s, 1s and Falses) share one.
        # A float's key keeps its sign, so -0.0 is not 0.0; a NaN never equals its key and gets its own.
        made: dict = {}
        out = []
        for v in Tables(data, layout, table, at).scalar(field, dtype).tolist():
            key = (v, math.copysign(1.0, v)) if kind == Kind.DOUBLE else v
            scalar = made.get(key)
            if scalar is None:
                scalar = made[key] = Scalar(kind, convert(v))
            out.append(scalar)
        return out
    if kind == Kind.STRING:
        refs = Tables(data, layout, "pte.String", at).ref("string_val").tolist()
        return [Scalar(kind, string(data.string(r)) or "") for r in refs]
    if kind == Kind.TENSOR:
        return _tensor_fields(data, at)
    table, dtype, convert = _LISTS[kind]
    items = data.vectors(Tables(data, layout, table, at).ref("items"), dtype, charge)
    if convert is None:
        return [ListValue(kind, tuple(v)) for v in items]
    return [ListValue(kind, tuple(map(convert, v))) for v in items]


def _tensor_fields(data: Bytes, at: np.ndarray) -> list[tuple]:
    """Each tensor's fields as a tuple, the arguments of ``_tensor`` but its ``where``."""
    t = Tables(data, layout, "pte.Tensor", at)
    n = len(t)
    sizes = data.vectors(t.ref("sizes"), "<i4", charge)
    dim_orders = data.vectors(t.ref("dim_order"), "<u1", charge)
    memory_id = [None] * n
    offset = [0] * n
    alloc = t.ref("allocation_info")
    planned = np.flatnonzero(alloc != ABSENT)
    if len(planned):
        a = Tables(data, layout, "pte.AllocationDetails", alloc[planned])
        offsets = a.scalar("memory_offset_low", "<u4").astype(np.int64) | (
            a.scalar("memory_offset_high", "<u4").astype(np.int64) << 32)
        for i, m, o in zip(planned.tolist(), a.scalar("memory_id", "<u4").tolist(), offsets.tolist()):
            memory_id[i], offset[i] = m, o
    extra: list[tuple | None] = [None] * n
    info = t.ref("extra_tensor_info")
    has_info = np.flatnonzero(info != ABSENT)
    if len(has_info):
        e = Tables(data, layout, "pte.ExtraTensorInfo", info[has_info])
        columns = zip(e.ref("fully_qualified_name").tolist(), e.scalar("location", "<i1").tolist(),
                      e.scalar("device_type", "<i1").tolist(), e.scalar("device_index", "<i1").tolist())
        for i, (fqn, location, device_type, device_index) in zip(has_info.tolist(), columns):
            extra[i] = (string(data.string(fqn)), location, device_type, device_index)
    return list(zip(
        t.scalar("scalar_type", "<i1").tolist(), sizes, dim_orders, t.scalar("shape_dynamism", "<i1").tolist(),
        t.scalar("storage_offset", "<i4").tolist(), t.scalar("data_buffer_idx", "<u4").tolist(),
        memory_id, offset, extra,
    ))


def _tensor(scalar_type, sizes, dim_order, dynamism, storage_offset, data_buffer_idx, memory_id, offset, extra,
            index: int, method: str) -> TensorSpec:
    where = f"{method} value {index}"  # (cheap next to the checks and the spec)
    if scalar_type not in ELEMENT_SIZE:
        raise InvalidProgram(f"{where}: scalar type {scalar_type} is not a type of the format")
    rank = len(sizes)
    if rank and min(sizes) < 0:
        raise InvalidProgram(f"{where}: sizes {sizes} include a negative size")
    if (rank >= len(_CONTIGUOUS) or tuple(dim_order) != _CONTIGUOUS[rank]) and sorted(dim_order) != list(range(rank)):
        raise InvalidProgram(f"{where}: dim_order {dim_order} is not a permutation of {rank} dims")
    # A zero size makes numel 0 but not the strides: the extent of every
    # dimension must fit in 64 bits as well, or a stride of the tensor would not.
    extent = 1
    for s in sizes:
        extent *= s or 1
    if extent * ELEMENT_SIZE[scalar_type] >= _MAX_NBYTES:
        raise InvalidProgram(f"{where}: sizes {sizes} overflow a 64-bit byte count")
    if not 0 <= dynamism <= 2:
        raise InvalidProgram(f"{where}: shape dynamism {dynamism} is not one of STATIC, DYNAMIC_BOUND, DYNAMIC_UNBOUND")
    if storage_offset != 0:
        raise NotSupported(f"{where}: storage_offset is {storage_offset}; only 0 is supported")
    fqn, external, device_type, device_index = None, False, 0, 0
    if extra is not None:
        fqn, location, device_type, device_index = extra
        if location not in _TENSOR_LOCATIONS:
            raise InvalidProgram(f"{where}: data location {location} is not one of SEGMENT, EXTERNAL")
        external = location == fb.TensorDataLocation.EXTERNAL
        check_device(device_type, device_index, where)
        if external and not fqn:
            raise InvalidProgram(f"{where}: stored externally but has no fully qualified name")
    return TensorSpec(scalar_type, tuple(sizes), tuple(dim_order), _DYNAMISM[dynamism], data_buffer_idx, memory_id,
                      offset, fqn, external, device_type, device_index)
