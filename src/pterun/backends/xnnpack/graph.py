"""The XNNGraph of a verified blob, decoded into plain Python: values, nodes, constants.

Nothing here computes; it only reads. Constants become CPU tensors viewing the
program's bytes (the blob's constant region, or named data), checked against
the number of bytes that back them.
"""

from __future__ import annotations

import math
import struct
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, ClassVar, cast

import numpy as np
import torch

from pterun.backends.xnnpack._generated import xnngraph_generated as fb
from pterun.backends.xnnpack._generated import xnngraph_layout as layout
from pterun.backends.xnnpack.blob import Blob
from pterun.errors import DelegateInvalidCompatibility, InvalidProgram, NotFound, PteError
from pterun.flatbuf import bulk

INVALID_ID = 0xFFFFFFFF
FLAG_EXTERNAL_INPUT = 1
FLAG_EXTERNAL_OUTPUT = 2
# Bounds no real graph comes near; a blob past them is corrupt, and honoring it would exhaust memory.
MAX_DIMS = 6
MAX_ELEMENTS = 1 << 34
MAX_EXTERNS = 4096


FLOAT32_TINY = 1.1754943508222875e-38  # the smallest normal float32


def positive_normal(x: float) -> bool:
    """Whether ``x`` is a positive normal float32, as XNNPACK requires of scales (NaN is not)."""
    return FLOAT32_TINY <= x < math.inf


class Datatype:
    """XNNDatatype codes (the schema's enum), with what each is stored as."""

    (INVALID, FP32, FP16, QINT8, QUINT8, QINT32, QCINT8, QCINT32, QCINT4, QDINT8, QBINT4, QPINT8, INT32,
     PFP32, BF16) = range(15)
    NAMES: ClassVar[dict[int, str]] = {v: k for k, v in vars(fb.XNNDatatype).items() if not k.startswith("_")}
    STORAGE: ClassVar[dict[int, torch.dtype]] = {
        FP32: torch.float32, FP16: torch.float16, BF16: torch.bfloat16, INT32: torch.int32,
        QINT8: torch.int8, QUINT8: torch.uint8, QINT32: torch.int32, QCINT8: torch.int8, QCINT32: torch.int32,
        QDINT8: torch.int8,
    }
    FLOATS: ClassVar[tuple[int, ...]] = (FP32, FP16, BF16)


NODE_NAMES = {v: k for k, v in vars(fb.XNodeUnion).items() if not k.startswith("_") and k != "NONE"}
_NODE_TABLES = {k: v.split(".")[-1] for k, v in layout.UNIONS["xnngraph.XNodeUnion"].items()}


@dataclass(frozen=True)
class PerTensor:
    scale: float
    zero_point: int


@dataclass(frozen=True)
class PerChannel:
    scales: torch.Tensor  # float32, one per index of `axis`
    axis: int


@dataclass(frozen=True)
class Blockwise:
    scales: torch.Tensor  # float32 (decoded from bf16), [channels, blocks]
    axis: int
    block_size: int


@dataclass(frozen=True)
class DynamicRows:
    num_nonbatch_dims: int


Quant = PerTensor | PerChannel | Blockwise | DynamicRows


@dataclass
class Value:
    id: int
    datatype: int
    dims: tuple[int, ...]
    external_id: int | None
    flags: int
    quant: Quant | None = None
    data: torch.Tensor | None = None  # constant data, CPU, in the value's storage dtype and dims

    @property
    def is_input(self) -> bool:
        return bool(self.flags & FLAG_EXTERNAL_INPUT)

    @property
    def is_output(self) -> bool:
        return bool(self.flags & FLAG_EXTERNAL_OUTPUT)

    @property
    def type_name(self) -> str:
        return Datatype.NAMES.get(self.datatype, f"datatype {self.datatype}").removeprefix("xnn_datatype_")

    @property
    def argument(self) -> int:
        """The delegate call's argument an input or output of the graph is (its ``external_id``)."""
        assert self.external_id is not None, f"value {self.id} is none of the graph's inputs or outputs"
        return self.external_id


@dataclass
class Node:
    index: int
    kind: str  # the union member's name: "XNNAdd", "XNNFullyConnected", ...
    debug_handle: int
    p: SimpleNamespace  # the node table's fields by their schema names
    output_min: float = -math.inf
    output_max: float = math.inf
    fused: tuple[Node, ...] = ()  # the blob's nodes optimize.py folded into this one, as they were

    @property
    def where(self) -> str:
        return f"node {self.index} ({self.kind}, debug handle {self.debug_handle})"


@dataclass
class Graph:
    values: dict[int, Value]
    nodes: list[Node]
    num_externs: int
    inputs: list[Value] = field(default_factory=list)  # by external id
    outputs: list[Value] = field(default_factory=list)


def _uncharged(elements: int) -> None:
    """The graph's reads need no budget: its buffer was verified, which bounds what its vectors hold."""


def _fields(data: bulk.Bytes, table: str, pos: np.ndarray) -> list[dict]:
    """Each table of type ``table`` at ``pos``: its scalar fields and scalar vectors (as tuples) by their schema
    names, in the schema's order; an absent field reads as its default."""
    name = f"xnngraph.{table}"
    tables = bulk.Tables(data, layout, name, pos)
    types = cast("Mapping[str, Any]", layout.SCALARS.get(name, {}))  # generated: its values are mixed tuples
    columns: dict[str, list] = {}
    for field_name, _, kind, _, _ in layout.TABLES[name]:
        if kind == "scalar":
            code, default = types[field_name]
            columns[field_name] = tables.scalar(field_name, code, default).tolist()
        elif kind == "vscalar":
            code, _ = types[field_name]
            columns[field_name] = [tuple(v) for v in data.vectors(tables.ref(field_name), code, _uncharged)]
    return [dict(zip(columns, row)) for row in zip(*columns.values())] if columns else [{} for _ in range(len(pos))]


def _by_kind(kinds: list[int], pos: np.ndarray, tables: Mapping[int, str], data: bulk.Bytes) -> list[dict | None]:
    """The fields (``_fields``) of each union member at ``pos``, read a kind at a time: None where the member is
    absent, empty where its kind names no table of ``tables``."""
    out: list[dict | None] = [None if at == bulk.ABSENT else {} for at in pos.tolist()]
    kind_array = np.array(kinds, np.int64)
    for kind in sorted(set(kinds) & tables.keys()):
        (which,) = np.nonzero((kind_array == kind) & (pos != bulk.ABSENT))
        for index, fields in zip(which.tolist(), _fields(data, tables[kind], pos[which])):
            out[index] = fields
    return out


def read_graph(blob: Blob, named_data: Mapping[str, memoryview], read: list[memoryview] | None = None) -> Graph:
    """Decodes a verified blob's graph. Raises PteError on anything inconsistent. ``read``, if given, gets
    the named data (the program's or a data file's) the constants were read from."""
    try:
        return _Reader(blob, named_data, read).read()
    except PteError:
        raise
    except (struct.error, IndexError, ValueError, TypeError, OverflowError, UnicodeDecodeError,
            AttributeError, RuntimeError) as exc:
        raise InvalidProgram(f"XNNPACK graph is corrupt ({type(exc).__name__}: {exc})") from None


class _Reader:
    """Reads every table of one type together (``flatbuf/bulk.py``: a graph has a thousand values and hundreds of
    nodes, and the generated readers cost microseconds a field), each read bounds-checked."""

    def __init__(self, blob: Blob, named_data: Mapping[str, memoryview], read: list[memoryview] | None) -> None:
        self.blob = blob
        self.named_data = named_data
        self.named_bytes: list[memoryview] = [] if read is None else read
        self.data = bulk.Bytes(blob.flatbuffer)
        self.root = bulk.Tables(self.data, layout, layout.ROOT, np.array([self.data.u32(0)], np.int64))
        self._constant_data: tuple[list[int], list[int], list[int]] | None = None
        self._buffers: list[int] | None = None

    def read(self) -> Graph:
        values: dict[int, Value] = {}
        for value in self.values():
            if value.id in values:
                raise InvalidProgram(f"XNNPACK graph defines value {value.id} twice")
            values[value.id] = value
        nodes = self.nodes()
        (num_externs,) = self.root.scalar("num_externs", "<u4").tolist()
        if num_externs > MAX_EXTERNS:
            raise InvalidProgram(f"XNNPACK graph claims {num_externs} external values")
        graph = Graph(values, nodes, num_externs)
        externals = sorted(((v.external_id, v) for v in values.values() if v.external_id is not None),
                           key=lambda external: external[0])
        graph.inputs = [v for _, v in externals if v.is_input]
        graph.outputs = [v for _, v in externals if v.is_output]
        ids = [i for i, _ in externals]
        if len(set(ids)) != len(ids) or any(i >= graph.num_externs for i in ids):
            raise InvalidProgram(f"XNNPACK graph external ids {ids} do not fit its {graph.num_externs} externals")
        return graph

    # -- values ----------------------------------------------------------------

    def values(self) -> Iterator[Value]:
        """The graph's values in order, their tensor values' fields and quantization parameters read for all of
        them at once."""
        data = self.data
        xvalues = bulk.Tables(data, layout, "xnngraph.XValue", self.root.vector_of_tables("xvalues")[0])
        kinds, unions = xvalues.scalar("xvalue_union_type", "<u1"), xvalues.ref("xvalue_union")
        known = ((kinds == fb.XValueUnion.XNNTensorValue) | (kinds == fb.XValueUnion.XNNQuantizedTensorValue)) \
            & (unions != bulk.ABSENT)
        quantized = known & (kinds == fb.XValueUnion.XNNQuantizedTensorValue)
        tensors = np.where(known, unions, bulk.ABSENT)
        qvalues = bulk.Tables(data, layout, "xnngraph.XNNQuantizedTensorValue", unions[quantized])
        tensors[quantized] = qvalues.ref("tensor_value")
        params = self.quant_params(qvalues)
        present = tensors != bulk.ABSENT
        tv = bulk.Tables(data, layout, "xnngraph.XNNTensorValue", tensors[present])
        row = (np.cumsum(present) - 1).tolist()
        qrow = (np.cumsum(quantized) - 1).tolist()
        fields = list(zip(
            tv.scalar("datatype", "<i2").tolist(),
            tv.scalar("num_dims", "<u4").tolist(), data.vectors(tv.ref("dims"), "<u4", _uncharged),
            tv.scalar("constant_buffer_idx", "<u4").tolist(), tv.scalar("external_id", "<u4").tolist(),
            tv.scalar("flags", "<u4").tolist(), tv.scalar("id_out", "<u4").tolist(),
            tv.scalar("dq_datatype", "<i2").tolist(),
        ))
        for index, (kind, ok, quant) in enumerate(zip(kinds.tolist(), known.tolist(), quantized.tolist())):
            if not ok:
                raise DelegateInvalidCompatibility(f"XNNPACK value {index} has unknown value type {kind}")
            if not present[index]:
                raise InvalidProgram(f"XNNPACK quantized value {index} has no tensor value")
            qparams = params[qrow[index]] if quant else None
            yield self.value(*fields[row[index]], qparams)  # type: ignore[call-arg]  # mypy: * then one more

    @staticmethod
    def quant_params(qvalues: bulk.Tables) -> list[tuple[int, dict | None]]:
        """Each quantized value's kind of parameters and their fields (``_by_kind``)."""
        kinds = qvalues.scalar("quant_params_type", "<u1").tolist()
        tables = {kind: name.split(".")[-1] for kind, name in layout.UNIONS["xnngraph.XNNQuantParams"].items()}
        return list(zip(kinds, _by_kind(kinds, qvalues.ref("quant_params"), tables, qvalues.data)))

    def value(self, datatype: int, num_dims: int, dims: list, buffer: int, external: int, flags: int, vid: int,
              dq_datatype: int, qparams: tuple[int, dict | None] | None) -> Value:
        dims = tuple(dims)
        if num_dims != len(dims):
            raise InvalidProgram(f"XNNPACK value {vid}: num_dims {num_dims} but {len(dims)} dims")
        if len(dims) > MAX_DIMS or math.prod(dims) > MAX_ELEMENTS:
            raise InvalidProgram(f"XNNPACK value {vid} has implausible dims {list(dims)}")
        if flags & ~(FLAG_EXTERNAL_INPUT | FLAG_EXTERNAL_OUTPUT):
            raise InvalidProgram(f"XNNPACK value {vid} has unknown flags 0x{flags:x}")
        value = Value(vid, datatype, dims, None if external == INVALID_ID else external, flags)
        if (value.external_id is None) != (flags == 0):
            raise InvalidProgram(f"XNNPACK value {value.id}: external id and input/output flags disagree")
        if dq_datatype not in (Datatype.INVALID,):
            # Blobs of the first format could ask for an input to be quantized on entry; the
            # exporter has written an explicit convert node instead for a long time.
            raise DelegateInvalidCompatibility(
                f"XNNPACK value {value.id} asks for on-the-fly quantization (dq_datatype), which is not supported"
            )
        if qparams is not None:
            value.quant = self.quant(*qparams, value)
        if buffer:
            value.data = self.constant_tensor(buffer, value)
        return value

    def quant(self, kind: int, q: dict | None, value: Value) -> Quant:
        if q is None:
            raise InvalidProgram(f"XNNPACK value {value.id} is quantized but has no parameters")
        if kind == fb.XNNQuantParams.PerTensorQuant:
            _check_scales(value, torch.tensor([q["scale"]], dtype=torch.float64))
            bounds = _ZERO_POINTS.get(value.datatype)
            if bounds is not None and not bounds[0] <= q["zero_point"] <= bounds[1]:
                raise InvalidProgram(f"XNNPACK value {value.id} ({value.type_name}): zero point {q['zero_point']} "
                                     f"is outside [{bounds[0]}, {bounds[1]}]")
            return PerTensor(q["scale"], q["zero_point"])
        if kind == fb.XNNQuantParams.PerChannelQuant:
            axis = q["channel_dim"]
            if not 0 <= axis < len(value.dims):
                raise InvalidProgram(f"XNNPACK value {value.id}: channel dim {axis} of a {len(value.dims)}-d value")
            n = value.dims[axis]
            if q["scale_buffer_idx"]:
                scales = self.constant_bytes(q["scale_buffer_idx"], 4 * n, f"scales of value {value.id}")
                scales = _tensor(scales, torch.float32, (n,))
            else:
                if len(q["scale"]) != n:
                    raise InvalidProgram(f"XNNPACK value {value.id}: {len(q['scale'])} scales for {n} channels")
                scales = torch.tensor(q["scale"], dtype=torch.float32)
            _check_scales(value, scales)
            return PerChannel(scales, axis)
        if kind == fb.XNNQuantParams.PerTokenDynamicQuant:
            return DynamicRows(q["num_nonbatch_dims"])
        if kind == fb.XNNQuantParams.PerChannelGroupQuant:
            return self.blockwise(q, value)
        raise DelegateInvalidCompatibility(f"XNNPACK value {value.id} has unknown quantization {kind}")

    def blockwise(self, q: dict, value: Value) -> Blockwise:
        group = q["group_size"]
        if len(value.dims) != 2 or group <= 0 or value.dims[1] % group:
            raise InvalidProgram(f"XNNPACK value {value.id}: blocks of {group} do not tile {value.dims}")
        shape = (value.dims[0], value.dims[1] // group)
        if q["scale_buffer_idx"]:
            raw = self.constant_bytes(q["scale_buffer_idx"], 2 * shape[0] * shape[1], f"scales of value {value.id}")
            scales = _tensor(raw, torch.bfloat16, shape).float()
        else:
            scales = torch.tensor(q["scale"], dtype=torch.float32)
            if scales.numel() != shape[0] * shape[1]:
                raise InvalidProgram(f"XNNPACK value {value.id}: {scales.numel()} scales for blocks {shape}")
            # Inline fp32 block scales are used at bf16 precision.
            scales = scales.reshape(shape).bfloat16().float()
        _check_scales(value, scales)
        return Blockwise(scales, q["channel_dim"], group)

    # -- constants ---------------------------------------------------------------

    def constant_tensor(self, index: int, value: Value) -> torch.Tensor:
        numel = math.prod(value.dims)
        if value.datatype in (Datatype.QCINT4, Datatype.QBINT4):
            # Two 4-bit weights per byte along the input channels (the last dimension), rows padded to a byte.
            if len(value.dims) != 2:
                raise InvalidProgram(f"XNNPACK 4-bit value {value.id} has dims {value.dims}; expected 2")
            rows, cols = value.dims
            packed = self.constant_bytes(index, rows * ((cols + 1) // 2), f"value {value.id}")
            return _tensor(packed, torch.uint8, (rows, (cols + 1) // 2))
        dtype = Datatype.STORAGE.get(value.datatype)
        if dtype is None:
            raise DelegateInvalidCompatibility(
                f"XNNPACK constant value {value.id} has datatype {value.type_name}, which is not supported"
            )
        nbytes = numel * dtype.itemsize
        return _tensor(self.constant_bytes(index, nbytes, f"value {value.id}"), dtype, value.dims)

    def constant_bytes(self, index: int, nbytes: int, what: str) -> memoryview:
        if self.blob.constants is None:
            buffers = self.buffers()
            if not 0 < index < len(buffers):
                raise InvalidProgram(f"XNNPACK {what}: constant buffer {index} does not exist")
            start, n = self.data.span(buffers[index], 1)
            if n < nbytes:
                raise InvalidProgram(f"XNNPACK {what}: needs {nbytes} bytes, constant buffer {index} has {n}")
            return self.blob.flatbuffer[start : start + nbytes]
        offsets, sizes, keys = self.constant_data()
        if not 0 < index < len(sizes):
            raise InvalidProgram(f"XNNPACK {what}: constant data entry {index} does not exist")
        size = sizes[index]
        key = self.data.string(keys[index])
        if size < nbytes:
            raise InvalidProgram(f"XNNPACK {what}: needs {nbytes} bytes, constant data entry {index} has {size}")
        if key is not None:
            name = key.decode("utf-8", errors="replace")
            data = self.named_data.get(name)
            if data is None:
                raise NotFound(f"XNNPACK {what}: named data {name!r} is not in the program or its data files")
            if len(data) < nbytes:
                raise InvalidProgram(f"XNNPACK {what}: needs {nbytes} bytes, named data {name!r} has {len(data)}")
            view = memoryview(data).cast("B")[:nbytes]
            self.named_bytes.append(view)
            return view
        offset = offsets[index]
        region = self.blob.constants
        if offset > len(region) or nbytes > len(region) - offset:
            raise InvalidProgram(
                f"XNNPACK {what}: {nbytes} bytes at {offset} run past the {len(region)}-byte constant data"
            )
        return region[offset : offset + nbytes]

    def buffers(self) -> list[int]:
        """Where each constant buffer's bytes (a bare flatbuffer's constants) lie."""
        if self._buffers is None:
            tables = bulk.Tables(self.data, layout, "xnngraph.Buffer", self.root.vector_of_tables("constant_buffer")[0])
            self._buffers = tables.ref("storage").tolist()
        return self._buffers

    def constant_data(self) -> tuple[list[int], list[int], list[int]]:
        """Each constant data entry's offset, size and where its named key lies."""
        if self._constant_data is None:
            entries = bulk.Tables(self.data, layout, "xnngraph.ConstantDataOffset",
                                  self.root.vector_of_tables("constant_data")[0])
            self._constant_data = (entries.scalar("offset", "<u8").tolist(), entries.scalar("size", "<u8").tolist(),
                                   entries.ref("named_key").tolist())
        return self._constant_data

    # -- nodes -------------------------------------------------------------------

    def nodes(self) -> list[Node]:
        data = self.data
        xnodes = bulk.Tables(data, layout, "xnngraph.XNode", self.root.vector_of_tables("xnodes")[0])
        kinds = xnodes.scalar("xnode_union_type", "<u1").tolist()
        handles = xnodes.scalar("debug_handle", "<u4").tolist()
        tables = _by_kind(kinds, xnodes.ref("xnode_union"), _NODE_TABLES, data)
        bounds = _by_kind([0] * len(kinds), xnodes.ref("output_min_max"), {0: "OutputMinMax"}, data)
        return [self.node(*node) for node in zip(range(len(kinds)), kinds, handles, tables, bounds)]

    @staticmethod
    def node(index: int, kind: int, debug_handle: int, fields: dict | None, bounds: dict | None) -> Node:
        name = NODE_NAMES.get(kind)
        if name is None or fields is None:
            raise DelegateInvalidCompatibility(
                f"XNNPACK node {index} (debug handle {debug_handle}) has unknown node type {kind}"
            )
        node = Node(index, name, debug_handle, SimpleNamespace(**fields))
        if bounds is not None:
            node.output_min, node.output_max = bounds["output_min"], bounds["output_max"]
            if math.isnan(node.output_min) or math.isnan(node.output_max):
                # XNNPACK refuses NaN bounds too; they would make no clamp.
                raise InvalidProgram(
                    f"XNNPACK {node.where}: output bounds [{node.output_min}, {node.output_max}] are not numbers"
                )
        return node


# Zero points XNNPACK accepts for 8-bit values, by datatype.
_ZERO_POINTS = {Datatype.QINT8: (-128, 127), Datatype.QUINT8: (0, 255)}


def _check_scales(value: Value, scales: torch.Tensor) -> None:
    """Quantization scales must be positive normal floats (XNNPACK refuses others): NaN, infinite, zero,
    negative or denormal scales would turn every result into a NaN, an infinity or a division by zero."""
    if not scales.numel():
        return
    lo, hi = torch.aminmax(scales)  # one pass, no temporaries; a NaN is both (aminmax propagates it)
    if not FLOAT32_TINY <= float(lo) <= float(hi) < math.inf:
        good = (scales >= FLOAT32_TINY) & (scales < math.inf)
        bad = float(scales[~good][0])
        raise InvalidProgram(f"XNNPACK value {value.id}: quantization scale {bad} is not a positive normal float")


def _tensor(data: memoryview, dtype: torch.dtype, shape) -> torch.Tensor:
    """A CPU tensor viewing the program's bytes (no copy; constants are never written)."""
    if not len(data):
        return torch.empty(tuple(shape), dtype=dtype)
    with warnings.catch_warnings():
        # torch warns that it cannot mark a tensor over read-only bytes as such.
        warnings.simplefilter("ignore", UserWarning)
        raw = torch.frombuffer(data, dtype=torch.uint8)
    if raw.data_ptr() % dtype.itemsize:
        raw = raw.clone()  # kernels expect aligned elements
    return raw.view(dtype).reshape(tuple(shape))
