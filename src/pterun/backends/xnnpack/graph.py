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
from typing import ClassVar

import numpy as np
import torch

from pterun.backends.xnnpack._generated import xnngraph_generated as fb
from pterun.backends.xnnpack._generated import xnngraph_layout as layout
from pterun.backends.xnnpack.blob import Blob
from pterun.errors import DelegateInvalidCompatibility, InvalidProgram, NotFound, PteError
from pterun.flatbuf import bulk
from pterun.flatbuf.tables import union_member, vector_span

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


def _camel(name: str) -> str:
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


def _fields(obj, table: str) -> SimpleNamespace:
    out = {}
    for name, _, kind, _, _ in layout.TABLES[f"xnngraph.{table}"]:
        if kind == "scalar":
            out[name] = getattr(obj, _camel(name))()
        elif kind == "vscalar":
            n = getattr(obj, _camel(name) + "Length")()
            getter = getattr(obj, _camel(name))
            out[name] = tuple(getter(i) for i in range(n))
    return SimpleNamespace(**out)


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
    def __init__(self, blob: Blob, named_data: Mapping[str, memoryview], read: list[memoryview] | None) -> None:
        self.blob = blob
        self.named_data = named_data
        self.named_bytes: list[memoryview] = [] if read is None else read
        self.root = fb.XNNGraph.GetRootAs(blob.flatbuffer, 0)

    def read(self) -> Graph:
        root = self.root
        values: dict[int, Value] = {}
        for value in self.values():
            if value.id in values:
                raise InvalidProgram(f"XNNPACK graph defines value {value.id} twice")
            values[value.id] = value
        nodes = [self.node(root.Xnodes(i), i) for i in range(root.XnodesLength())]
        if root.NumExterns() > MAX_EXTERNS:
            raise InvalidProgram(f"XNNPACK graph claims {root.NumExterns()} external values")
        graph = Graph(values, nodes, root.NumExterns())
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
        """The graph's values in order. Their tensor values' fields are read for all of them at once
        (``flatbuf/bulk.py``: a graph has a thousand values, the generated readers cost microseconds a field);
        the quantization parameters of the quantized ones through the generated readers."""
        data = bulk.Bytes(self.blob.flatbuffer)
        graph = bulk.Tables(data, layout, layout.ROOT, np.array([data.u32(0)], np.int64))
        xvalues = bulk.Tables(data, layout, "xnngraph.XValue", graph.vector_of_tables("xvalues")[0])
        kinds, unions = xvalues.scalar("xvalue_union_type", "<u1"), xvalues.ref("xvalue_union")
        known = ((kinds == fb.XValueUnion.XNNTensorValue) | (kinds == fb.XValueUnion.XNNQuantizedTensorValue)) \
            & (unions != bulk.ABSENT)
        quantized = known & (kinds == fb.XValueUnion.XNNQuantizedTensorValue)
        tensors = np.where(known, unions, bulk.ABSENT)
        tensors[quantized] = bulk.Tables(data, layout, "xnngraph.XNNQuantizedTensorValue",
                                         unions[quantized]).ref("tensor_value")
        present = tensors != bulk.ABSENT
        tv = bulk.Tables(data, layout, "xnngraph.XNNTensorValue", tensors[present])
        row = (np.cumsum(present) - 1).tolist()
        fields = list(zip(
            tv.scalar("datatype", "<u2").astype(np.uint16).view(np.int16).tolist(),  # int16 fields
            tv.scalar("num_dims", "<u4").tolist(), data.vectors(tv.ref("dims"), "<u4", lambda n: None),
            tv.scalar("constant_buffer_idx", "<u4").tolist(), tv.scalar("external_id", "<u4").tolist(),
            tv.scalar("flags", "<u4").tolist(), tv.scalar("id_out", "<u4").tolist(),
            tv.scalar("dq_datatype", "<u2").astype(np.uint16).view(np.int16).tolist(),
        ))
        for index, (kind, ok, quant) in enumerate(zip(kinds.tolist(), known.tolist(), quantized.tolist())):
            if not ok:
                raise DelegateInvalidCompatibility(f"XNNPACK value {index} has unknown value type {kind}")
            if not present[index]:
                raise InvalidProgram(f"XNNPACK quantized value {index} has no tensor value")
            qvalue = None
            if quant:
                qvalue = fb.XNNQuantizedTensorValue()
                qvalue.Init(self.blob.flatbuffer, int(unions[index]))
            yield self.value(*fields[row[index]], qvalue)  # type: ignore[call-arg]  # mypy: * then one more

    def value(self, datatype: int, num_dims: int, dims: list, buffer: int, external: int, flags: int, vid: int,
              dq_datatype: int, qvalue) -> Value:
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
        if qvalue is not None:
            value.quant = self.quant(qvalue, value)
        if buffer:
            value.data = self.constant_tensor(buffer, value)
        return value

    def quant(self, qvalue, value: Value) -> Quant:
        kind = qvalue.QuantParamsType()
        table = qvalue.QuantParams()
        if table is None:
            raise InvalidProgram(f"XNNPACK value {value.id} is quantized but has no parameters")
        if kind == fb.XNNQuantParams.PerTensorQuant:
            q = union_member(table, fb.PerTensorQuant)
            _check_scales(value, torch.tensor([q.Scale()], dtype=torch.float64))
            bounds = _ZERO_POINTS.get(value.datatype)
            if bounds is not None and not bounds[0] <= q.ZeroPoint() <= bounds[1]:
                raise InvalidProgram(f"XNNPACK value {value.id} ({value.type_name}): zero point {q.ZeroPoint()} is "
                                     f"outside [{bounds[0]}, {bounds[1]}]")
            return PerTensor(q.Scale(), q.ZeroPoint())
        if kind == fb.XNNQuantParams.PerChannelQuant:
            q = union_member(table, fb.PerChannelQuant)
            axis = q.ChannelDim()
            if not 0 <= axis < len(value.dims):
                raise InvalidProgram(f"XNNPACK value {value.id}: channel dim {axis} of a {len(value.dims)}-d value")
            n = value.dims[axis]
            if q.ScaleBufferIdx():
                scales = self.constant_bytes(q.ScaleBufferIdx(), 4 * n, f"scales of value {value.id}")
                scales = _tensor(scales, torch.float32, (n,))
            else:
                if q.ScaleLength() != n:
                    raise InvalidProgram(f"XNNPACK value {value.id}: {q.ScaleLength()} scales for {n} channels")
                scales = torch.tensor([q.Scale(i) for i in range(n)], dtype=torch.float32)
            _check_scales(value, scales)
            return PerChannel(scales, axis)
        if kind == fb.XNNQuantParams.PerTokenDynamicQuant:
            q = union_member(table, fb.PerTokenDynamicQuant)
            return DynamicRows(q.NumNonbatchDims())
        if kind == fb.XNNQuantParams.PerChannelGroupQuant:
            q = union_member(table, fb.PerChannelGroupQuant)
            if len(value.dims) != 2 or q.GroupSize() <= 0 or value.dims[1] % q.GroupSize():
                raise InvalidProgram(f"XNNPACK value {value.id}: blocks of {q.GroupSize()} do not tile {value.dims}")
            shape = (value.dims[0], value.dims[1] // q.GroupSize())
            if q.ScaleBufferIdx():
                raw = self.constant_bytes(q.ScaleBufferIdx(), 2 * shape[0] * shape[1], f"scales of value {value.id}")
                scales = _tensor(raw, torch.bfloat16, shape).float()
            else:
                scales = torch.tensor([q.Scale(i) for i in range(q.ScaleLength())], dtype=torch.float32)
                if scales.numel() != shape[0] * shape[1]:
                    raise InvalidProgram(f"XNNPACK value {value.id}: {scales.numel()} scales for blocks {shape}")
                # Inline fp32 block scales are used at bf16 precision.
                scales = scales.reshape(shape).bfloat16().float()
            _check_scales(value, scales)
            return Blockwise(scales, q.ChannelDim(), q.GroupSize())
        raise DelegateInvalidCompatibility(f"XNNPACK value {value.id} has unknown quantization {kind}")

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
        root = self.root
        if self.blob.constants is None:
            if not 0 < index < root.ConstantBufferLength():
                raise InvalidProgram(f"XNNPACK {what}: constant buffer {index} does not exist")
            buffer = root.ConstantBuffer(index)
            start, n = vector_span(buffer)
            if n < nbytes:
                raise InvalidProgram(f"XNNPACK {what}: needs {nbytes} bytes, constant buffer {index} has {n}")
            return self.blob.flatbuffer[start : start + nbytes]
        if not 0 < index < root.ConstantDataLength():
            raise InvalidProgram(f"XNNPACK {what}: constant data entry {index} does not exist")
        entry = root.ConstantData(index)
        size = entry.Size()
        key = entry.NamedKey()
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
        offset = entry.Offset()
        region = self.blob.constants
        if offset > len(region) or nbytes > len(region) - offset:
            raise InvalidProgram(
                f"XNNPACK {what}: {nbytes} bytes at {offset} run past the {len(region)}-byte constant data"
            )
        return region[offset : offset + nbytes]

    # -- nodes -------------------------------------------------------------------

    def node(self, xnode, index: int) -> Node:
        kind = xnode.XnodeUnionType()
        name = NODE_NAMES.get(kind)
        table = xnode.XnodeUnion()
        if name is None or table is None:
            raise DelegateInvalidCompatibility(
                f"XNNPACK node {index} (debug handle {xnode.DebugHandle()}) has unknown node type {kind}"
            )
        table_name = _NODE_TABLES[kind]
        obj = union_member(table, getattr(fb, table_name))
        node = Node(index, name, xnode.DebugHandle(), _fields(obj, table_name))
        bounds = xnode.OutputMinMax()
        if bounds is not None:
            node.output_min, node.output_max = bounds.OutputMin(), bounds.OutputMax()
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
