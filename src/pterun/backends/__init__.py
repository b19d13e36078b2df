"""Delegates: the backend interface, the registry keyed by backend id, and the built-in backends."""

from pterun.backends.interface import BackendInitContext, BackendInterface, CompileSpec, DelegateTracer
from pterun.backends.registry import BackendRegistry


def default_backend_registry() -> BackendRegistry:
    """A registry of every built-in backend; each is imported only when a program needs it."""
    registry = BackendRegistry()

    def cuda():
        from pterun.backends.cuda import CudaBackend

        return CudaBackend()

    registry.register("PterunCudaBackend", cuda)
    registry.register("XnnpackBackend", lambda: __import__("pterun.backends.xnnpack", fromlist=["_"]).XnnpackBackend())
    registry.register("VulkanBackend", lambda: __import__("pterun.backends.webgpu", fromlist=["_"]).WebGPUBackend())
    return registry


__all__ = [
    "BackendInitContext", "BackendInterface", "BackendRegistry", "CompileSpec", "DelegateTracer",
    "default_backend_registry",
]
