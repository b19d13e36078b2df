"""Delegates: the backend interface, the registry keyed by backend id, and the built-in backends."""

from pterun.backends.aoti import CudaBackend
from pterun.backends.interface import BackendInitContext, BackendInterface, CompileSpec, DelegateTracer
from pterun.backends.registry import BackendRegistry


def default_backend_registry() -> BackendRegistry:
    """A registry of every built-in backend; each is imported only when a program needs it."""
    registry = BackendRegistry()

    def nested_cuda():
        from pterun.backends.cuda import PterunCudaBackend

        return PterunCudaBackend()

    registry.register("CudaBackend", CudaBackend)  # ExecuTorch's own: AOTInductor libraries (native code)
    registry.register("PterunCudaBackend", nested_cuda)
    registry.register("XnnpackBackend", lambda: __import__("pterun.backends.xnnpack", fromlist=["_"]).XnnpackBackend())
    registry.register("VulkanBackend", lambda: __import__("pterun.backends.webgpu", fromlist=["_"]).WebGPUBackend())
    return registry


__all__ = [
    "BackendInitContext", "BackendInterface", "BackendRegistry", "CompileSpec", "CudaBackend", "DelegateTracer",
    "default_backend_registry",
]
