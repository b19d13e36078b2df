"""Operator name -> callable on torch tensors, on any device. Never sees the file format."""

from __future__ import annotations

from pterun.kernels.registry import Binding, KernelFactory, KernelRegistry, fixed_arity


def default_registry() -> KernelRegistry:
    """A registry holding every built-in kernel, with ATen as the fallback provider."""
    from pterun.kernels import aten, device_copy, dim_order, llm, prim, quantized

    registry = KernelRegistry()
    for module in (prim, dim_order, device_copy, quantized, llm):
        module.register(registry)
    registry.add_provider(aten.aten_provider, aten.aten_names)
    return registry


__all__ = ["Binding", "KernelFactory", "KernelRegistry", "default_registry", "fixed_arity"]
