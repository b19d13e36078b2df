"""Input binders: per input, one function made at load that checks a caller's value and binds it.

A planned input is copied into its arena (after its shape is checked against
the plan's upper bound, and the arena view re-strided for a new shape); an
unplanned one is passed to the compiled function as it is. Everything a
binder needs (dtype, rank, bound, where it goes) is worked out when it is
made, so binding an input is a handful of comparisons.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from pterun import native
from pterun.core.device import Device, DeviceType
from pterun.core.dtype import name as dtype_name
from pterun.core.dtype import storage_dtype
from pterun.core.layout import strides_for
from pterun.errors import InvalidArgument, NotSupported
from pterun.executor.call.outputs import check_device_memory
from pterun.format import Dynamism, Kind, Scalar, TensorSpec

Binder = Callable[[object, bool, list], None]
"""``bind(value, copy_inputs, args)``: checks ``value`` and puts it where the method reads it."""

_STRIDED = torch.strided
_TENSOR = torch.Tensor


def tensor_binder(spec: TensorSpec, where: str, *, argument: int | None = None, device: Device | None = None,
                  target: torch.Tensor | None = None) -> Binder:
    """An input tensor passed as compiled-function argument ``argument`` (on ``device``), or copied into
    ``target``, its planned memory."""
    expected_dtype = storage_dtype(spec.scalar_type)
    rank = len(spec.sizes)
    bound = spec.numel
    static = spec.dynamism == Dynamism.STATIC
    dim_order = spec.dim_order
    if target is not None:
        expected_device, position = target.device, 0
    elif argument is not None and device is not None:
        expected_device, position = device.torch, argument
    else:
        raise TypeError("tensor_binder: an input is copied into its target, or passed as an argument on a device")
    # Memory the plan tags as CUDA memory is checked with the driver (outputs.check_device_memory).
    checked_on = device if target is None and spec.device_type == DeviceType.CUDA else None

    def bind(x, copy_inputs: bool, args: list) -> None:
        if not isinstance(x, torch.Tensor):
            raise InvalidArgument(f"{where}: expected a Tensor, got {type(x).__name__}")
        if x.dtype != expected_dtype:
            raise InvalidArgument(f"{where}: expected a {dtype_name(spec.scalar_type)} tensor, got {x.dtype}")
        if x.device != expected_device and not (
            expected_device.type == x.device.type and expected_device.index is None
        ):
            if not copy_inputs:
                raise InvalidArgument(
                    f"{where}: expected a tensor on {expected_device}, got one on {x.device} "
                    f"(pass copy_inputs=True to have it copied)"
                )
            if x.is_meta:
                raise InvalidArgument(f"{where}: got a tensor on the meta device, which has no data to copy")
            x = x.to(expected_device)
        if x.layout is not _STRIDED:
            raise InvalidArgument(
                f"{where}: expected a dense (strided) tensor, got a {str(x.layout).removeprefix('torch.')} one"
            )
        if x.requires_grad:
            # Inputs are data, as in ExecuTorch. Copying a tensor that requires grad into a planned input
            # would record autograd history on the arena view for good (outputs aliasing it would come back
            # requiring grad, and the method would keep the caller's graph alive); an unplanned input would
            # hand that history to outputs.
            x = x.detach()
        try:
            shape = tuple(x.shape)
        except RuntimeError:
            # A nested tensor of strided layout has no single shape (torch refuses to say one).
            if x.is_nested:
                raise InvalidArgument(f"{where}: expected a dense tensor, got a nested tensor") from None
            raise
        if shape != spec.sizes:
            if len(shape) != rank:
                raise NotSupported(f"{where}: expected {rank} dimensions, got shape {list(shape)}")
            if static:
                raise NotSupported(f"{where}: expected shape {list(spec.sizes)} (static), got {list(shape)}")
            numel = math.prod(shape)
            if numel > bound:
                raise NotSupported(
                    f"{where}: shape {list(shape)} has {numel} elements, more than the "
                    f"{bound} of its upper bound {list(spec.sizes)}"
                )
        if target is None:
            if checked_on is not None:
                check_device_memory(x, checked_on, where)
            args[position] = x
        else:
            if tuple(target.shape) != shape:
                target.as_strided_(shape, strides_for(shape, dim_order))
            target.copy_(x)

    if target is None or target.device.type != "cpu":
        return bind
    return _cpu_binder(bind, target, expected_dtype, tuple(dim_order) == tuple(range(rank)))


def _cpu_binder(checked: Binder, target: torch.Tensor, dtype: torch.dtype, row_major: bool) -> Binder:
    """``checked``, but for the usual call: a plain dense CPU tensor of the shape the input's memory has now (one
    ``checked`` took), copied as it is; a contiguous one of a real dtype byte for byte, where the native kernels are
    built and the memory is laid out row-major (``copy_`` costs several times more than the copy of a small input).
    Anything else is checked in full."""
    move = native.kernels.copy_bytes if native.kernels is not None and row_major and not dtype.is_complex else None
    pointer = target.data_ptr()  # a resized input keeps its memory's start
    now = [target.shape, target.numel() * target.element_size()]  # the memory's shape and bytes

    def bind(x, copy_inputs: bool, args: list) -> None:
        if (type(x) is _TENSOR and x.dtype is dtype and x.is_cpu and x.layout is _STRIDED and not x.is_nested
                and not x.requires_grad and x.shape == now[0]):
            if move is not None and x.is_contiguous() and (source := x.data_ptr()):
                move(pointer, source, now[1])
            else:
                target.copy_(x)
            return
        checked(x, copy_inputs, args)
        if target.shape != now[0]:
            now[:] = [target.shape, target.numel() * target.element_size()]

    return bind


def scalar_binder(value, where: str) -> Binder:
    """A non-tensor input: the value the program was exported with is the only one it takes."""
    kind = value.kind
    expected = value.value if isinstance(value, Scalar) else None
    number = float(expected) if isinstance(expected, (int, float)) else math.nan  # a DOUBLE's value, compared closely

    def bind(x, copy_inputs: bool, args: list) -> None:
        if kind == Kind.NULL:
            if x is not None:
                raise InvalidArgument(f"{where}: expected None, got {type(x).__name__}")
        elif kind == Kind.BOOL:
            if not isinstance(x, bool) or x != expected:
                raise InvalidArgument(f"{where}: the program was exported with {expected!r}; got {x!r}")
        elif kind == Kind.INT:
            if isinstance(x, bool) or not isinstance(x, int) or x != expected:
                raise InvalidArgument(f"{where}: the program was exported with {expected!r}; got {x!r}")
        elif kind == Kind.DOUBLE:
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not _close(float(x), number):
                raise InvalidArgument(f"{where}: the program was exported with {expected!r}; got {x!r}")
        elif kind == Kind.STRING:
            if x != expected:
                raise InvalidArgument(f"{where}: the program was exported with {expected!r}; got {x!r}")
        else:
            raise InvalidArgument(f"{where}: inputs of kind {kind.name} cannot be set")

    return bind


def _close(a: float, b: float) -> bool:
    if math.isnan(a) and math.isnan(b):
        return True
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= 1e-4 + abs(1e-5 * b)
