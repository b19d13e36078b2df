"""Operator name -> callable on torch tensors, on any device. Never sees the file format."""

from __future__ import annotations

import importlib.util

from pterun import native
from pterun.core.device import DeviceType
from pterun.kernels.registry import (
    Binding,
    Functional,
    KernelFactory,
    KernelRegistry,
    exact_count,
    fixed_arity,
)


def default_registry() -> KernelRegistry:
    """A registry holding every built-in kernel, with ATen as the fallback provider."""
    from pterun.kernels import (
        aten,
        binary,
        conv_cuda,
        device_copy,
        dim_order,
        float_stats,
        layer_norm,
        llm,
        prim,
        quantized,
        split,
        views,
    )
    from pterun.kernels.llm import positions  # what executor/load/fuse/positions.py makes of host start positions

    registry = KernelRegistry()
    for module in (prim, dim_order, device_copy, quantized, llm, positions):
        module.register(registry)
    registry.add_provider(views.view_copy_provider, lambda: ())
    registry.add_provider(aten.aten_provider, aten.aten_names)
    registry.register("aten::mm.out", _cuda_mm, DeviceType.CUDA, builtin=True)
    if importlib.util.find_spec("triton") is not None:
        # What executor/load/fuse/swiglu.py makes of a SwiGLU MLP's gate, up and SiLU-product steps.
        registry.register("pterun::swiglu.out", _cuda_swiglu, DeviceType.CUDA, builtin=True)
    for name in float_stats.STATISTICS:
        registry.register(name, float_stats.float_statistics(name), DeviceType.CUDA, builtin=True)
    for name, factory in conv_cuda.FACTORIES.items():  # a ConvNet's steps straight into their outs
        registry.register(name, factory, DeviceType.CUDA, builtin=True)
    for name in split.NAMES:
        registry.register(name, split.any_strides(name), DeviceType.CUDA, builtin=True)
    if native.kernels is not None:
        for name in binary.NAMES:  # small float32 arithmetic in one native call each (and replayed in runs)
            registry.register(name, binary.factory(name), DeviceType.CPU, builtin=True)
        # Short rows in ExecuTorch's order (its bits), in one native call each (and replayed in runs).
        registry.register(layer_norm.NAME, layer_norm.factory, DeviceType.CPU, builtin=True)
    return registry


def _cuda_mm(count: int) -> Binding:
    """mm on CUDA: one-row products in half precision go to a Triton matrix-vector kernel."""
    from pterun.kernels import aten

    generic = aten.aten_kernel("aten::mm.out")(count)
    try:
        from pterun.kernels.triton.gemv import mm, mm_out, mm_together
    except ImportError:  # no Triton: torch's kernel
        return generic
    return Binding(mm_out, (0, 1), (("out", 2),), None, (), generic.writes, accepts=generic.accepts, strided=True,
                   functional=Functional(mm, (2,), together=mm_together))


def _cuda_swiglu(count: int) -> Binding:
    """swiglu(x, gate_t, up_t, out=h): the gate and up weights read in one pass by a Triton kernel."""
    from pterun.kernels.triton.gated import swiglu, swiglu_out

    return exact_count(Binding(swiglu_out, (0, 1, 2), (("out", 3),), None, (), (3,),
                               accepts=(frozenset({"tensor"}),) * 4, strided=True, functional=Functional(swiglu, (3,))),
                       4, "pterun::swiglu.out")(count)


__all__ = ["Binding", "Functional", "KernelFactory", "KernelRegistry", "default_registry", "exact_count", "fixed_arity"]
