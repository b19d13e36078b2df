"""Shape arithmetic shared by the operator builders (all of it runs on the host, at resize time)."""

from __future__ import annotations

import math

from pterun.backends.webgpu.builder import groups
from pterun.backends.webgpu.slots import TSlot
from pterun.core.layout import strides_for
from pterun.errors import DelegateInvalidCompatibility, InvalidArgument

MAX_DIMS = 8  # dimensions a parameter block has room for (sizes and strides at 8.., 16.., 24.., 32..)
WG = 64  # invocations per workgroup of the one-thread-per-element kernels

# Operand addressing modes of the elementwise kernels: a general strided walk, the same index as
# the output (same shape, contiguous), or one element for every output (a broadcast scalar).
STRIDED, SAME, SCALAR = 0, 1, 2


def norm_dim(dim: int, ndim: int, what: str = "dim") -> int:
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise InvalidArgument(f"{what} {dim} is out of range for a tensor of rank {ndim}")
    return dim % n


def broadcast(*shapes) -> tuple[int, ...]:
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for d in range(rank):
        size = 1
        for s in shapes:
            k = d - (rank - len(s))
            if k < 0:
                continue
            v = s[k]
            if v != 1:
                if size not in (1, v):
                    raise InvalidArgument(
                        f"shapes {', '.join(str(list(x)) for x in shapes)} do not broadcast"
                    )
                size = v
        out.append(size)
    return tuple(out)


def contiguous_strides(shape) -> list[int]:
    """Every tensor of a compiled graph is contiguous in its buffer."""
    return list(strides_for(shape, range(len(shape))))


def broadcast_strides(shape, out_shape) -> list[int]:
    """Strides that walk a contiguous ``shape`` while iterating ``out_shape`` (0 along broadcast dims)."""
    strides = contiguous_strides(shape)
    pad = len(out_shape) - len(shape)
    result = [0] * len(out_shape)
    for d in range(len(shape)):
        result[d + pad] = 0 if shape[d] == 1 else strides[d]
    return result


def operand_mode(shape, out_shape) -> int:
    if tuple(shape) == tuple(out_shape):
        return SAME
    if math.prod(shape) == 1:
        return SCALAR
    return STRIDED


def broadcast_params(shape, operands, alpha=0) -> list:
    """The parameter words of the broadcasting kernels (binary, where, swiglu) for an output of ``shape``:
    numel, rank, each operand's addressing mode (four bits apiece), alpha; at 8 the output's sizes, then
    each operand's strides."""
    modes = 0
    for k, operand in enumerate(operands):
        modes |= operand_mode(operand, shape) << (4 * k)
    words = [math.prod(shape), len(shape), modes, alpha, 0, 0, 0, 0, *padded(shape, 1)]
    for operand in operands:
        words += padded(broadcast_strides(operand, shape))
    return words


def padded(values, fill: int = 0) -> list[int]:
    values = list(values)
    if len(values) > MAX_DIMS:
        raise DelegateInvalidCompatibility(
            f"tensors of rank {len(values)} (more than {MAX_DIMS}) are not supported"
        )
    return values + [fill] * (MAX_DIMS - len(values))


def grid(n: int) -> tuple[int, int, int]:
    return groups(n, WG)


def rows_grid(rows: int) -> tuple[int, int, int]:
    return groups(rows, 1)


def serial_rows(rows: int, length: int) -> bool:
    """Whether a row kernel runs one row per invocation rather than one per workgroup.

    A workgroup per row only pays when rows are few and long: its barriers are
    cheap on GPUs but cost every row a round of synchronization (on software
    rasterizers, a great deal), and with many rows one per invocation already
    fills the device.
    """
    return rows >= 64 or length <= 64


def row_dispatches(b, family: str, subs: dict, bindings: list, params, layout) -> None:
    """Both variants of a row kernel; ``layout()`` -> (rows, length). Exactly one runs for each shape."""

    def grid_for(serial: bool):
        def work():
            rows, length = layout()
            if not rows or not length or serial_rows(rows, length) != serial:
                return (0, 0, 0)
            return groups(rows, WG) if serial else rows_grid(rows)

        return work

    for serial in (True, False):
        b.dispatch(
            family, {**subs, "SERIAL": "true" if serial else "false"}, bindings, params, grid_for(serial)
        )


def per_dim(values: list[int], default: list[int]) -> list[int]:
    """A window's size, stride, padding or dilation along each spatial dimension: ``default`` when none
    is given, one value for all of them, or one each."""
    if not values:
        return list(default)
    if len(values) == 1:
        return values * len(default)
    return list(values)


def pairs(*per_dims: list[int]) -> list[int]:
    """The (h, w) values of each, in order: how the convolution and pooling kernels take them."""
    return [v for p in per_dims for v in p[:2]]


def require_f32(b, *slots: TSlot) -> None:
    if any(t.elem != "f32" for t in slots):
        raise DelegateInvalidCompatibility(f"{b.op.name}: only float32 is supported")


def compute_type(*slots: TSlot) -> str:
    """The type arithmetic runs in: float if any operand is, else signed int unless all are bool-like."""
    elems = {s.elem for s in slots}
    if "f32" in elems:
        return "f32"
    if elems == {"u32"}:
        return "u32"
    return "i32"
