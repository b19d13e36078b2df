"""VulkanBackend on WebGPU: runs the VkGraph blobs of ExecuTorch's Vulkan/WebGPU partitioners.

At init the blob is split and verified, its graph decoded, SwiGLU chains
fused, and the graph compiled for the process's WebGPU device: every buffer
allocated, every pipeline and bind group made. Execute writes the inputs,
re-sizes the graph when an input's shape changed (parameters only; nothing is
compiled or allocated), records one compute pass, and reads the outputs.
With profiling on, the executor asks ``profiled`` for a second execute that
reports each node (profile.py); ``execute`` stays as it is.
"""

from __future__ import annotations

from pterun.backends.interface import BackendInitContext, BackendInterface, CompileSpec, DelegateTracer
from pterun.backends.webgpu import device
from pterun.backends.webgpu.blob import split_blob
from pterun.backends.webgpu.fuse import fuse_swiglu
from pterun.backends.webgpu.graph import Graph, constant_bytes, read_graph
from pterun.backends.webgpu.ops import BUILDERS
from pterun.backends.webgpu.profile import ProfiledRun
from pterun.backends.webgpu.program import GpuProgram
from pterun.errors import DelegateInvalidHandle, NotFound

NAME = "VulkanBackend"
# Load option (``backend_options={"VulkanBackend": {"fuse_swiglu": False}}``): keep SwiGLU unfused.
FUSE_SWIGLU = "fuse_swiglu"
# Load option: when profiling, time each node on the host around its own submission even where the
# device has timestamp queries (profile.py says what each way measures).
GPU_TIMESTAMPS = "gpu_timestamps"


class WebGPUDelegate:
    """One initialized blob: its compiled program, and what was done to its graph."""

    def __init__(self, graph: Graph, constant, *, fuse: bool = True, gpu_timestamps: bool = True) -> None:
        self.fused_swiglu = fuse_swiglu(graph) if fuse else 0
        self.graph = graph
        self.program = GpuProgram(device.gpu(), graph, constant, BUILDERS)
        self.gpu_timestamps = gpu_timestamps
        self.profiles: list[ProfiledRun] = []

    @classmethod
    def from_graph(cls, graph: Graph, constants: dict[int, bytes] | None = None, *, fuse: bool = True):
        """A delegate for a graph built or edited in memory, with its constants given by index."""
        constants = constants or {}
        return cls(graph, lambda i: memoryview(constants[i]).cast("B"), fuse=fuse)

    def __call__(self, args: list) -> None:
        self.program.execute(args)

    def profiled(self, tracer: DelegateTracer) -> ProfiledRun:
        """An execute that reports each node to ``tracer`` (made once, at load, when profiling is on)."""
        run = ProfiledRun(self.program, tracer, gpu_timestamps=self.gpu_timestamps)
        self.profiles.append(run)
        return run

    def release(self) -> None:
        for run in self.profiles:
            run.release()
        self.profiles.clear()
        self.program.release()

    @property
    def dispatch_count(self) -> int:
        """Dispatches the last execute recorded."""
        return self.program.dispatch_count

    @property
    def op_names(self) -> list[str]:
        return self.program.op_names


class WebGPUBackend(BackendInterface):
    def is_available(self) -> bool:
        return device.available()

    def init(
        self, context: BackendInitContext, processed: memoryview, compile_specs: tuple[CompileSpec, ...]
    ) -> WebGPUDelegate:
        if not device.available():
            raise NotFound(f"{NAME}: {device.unavailable_reason()}")
        blob = split_blob(processed)
        graph = read_graph(blob)
        constants = blob.constants
        named = context.named_data
        fuse = bool(context.get_runtime_spec(FUSE_SWIGLU, True))
        stamps = bool(context.get_runtime_spec(GPU_TIMESTAMPS, True))
        # The blob's memory belongs to the program; constants are copied to the GPU during init.
        return WebGPUDelegate(
            graph, lambda i: constant_bytes(graph, i, constants, named), fuse=fuse, gpu_timestamps=stamps
        )

    def execute(self, handle, args: list) -> None:
        if not isinstance(handle, WebGPUDelegate):
            raise DelegateInvalidHandle(f"{NAME}: execute got a handle it did not make")
        handle(args)

    def written_arguments(self, handle, args) -> range:
        if not isinstance(handle, WebGPUDelegate):
            raise DelegateInvalidHandle(f"{NAME}: got a handle it did not make")
        return handle.program.written_arguments(len(args))

    def profiled(self, handle, tracer: DelegateTracer) -> ProfiledRun:
        if not isinstance(handle, WebGPUDelegate):
            raise DelegateInvalidHandle(f"{NAME}: got a handle it did not make")
        return handle.profiled(tracer)

    def destroy(self, handle) -> None:
        if isinstance(handle, WebGPUDelegate):
            handle.release()


__all__ = ["FUSE_SWIGLU", "GPU_TIMESTAMPS", "NAME", "WebGPUBackend", "WebGPUDelegate"]
