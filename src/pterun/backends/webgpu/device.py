"""The process's one WebGPU device, and the compiled pipelines every delegate shares.

wgpu-py is imported on first use, so a program without VulkanBackend delegates
never loads it. The adapter is looked up once: when wgpu is missing or no
adapter exists, :func:`available` is false for the rest of the process and the
executor refuses such programs with ``NotFound``.

Pipelines are keyed by their WGSL source, which depends on element types and
the operator's formula but never on shapes (shapes live in each dispatch's
parameter block), so resizing a graph never compiles anything.
"""

from __future__ import annotations

import re
import threading

from pterun.errors import DelegateInvalidCompatibility, NotFound

_lock = threading.Lock()
_gpu: Gpu | None = None
_probe: str | None = None  # why no device exists ("" once one was found)

PARAM_WORDS = 64  # u32 words in each dispatch's parameter block (see common.wgsl)

_BINDING = re.compile(
    r"@binding\((\d+)\)\s*var<\s*(storage\s*,\s*read_write|storage\s*,\s*read|storage|uniform)\s*>"
)


def _import_wgpu():
    import wgpu

    return wgpu


def available() -> bool:
    """Whether a WebGPU adapter exists (wgpu-py installed and a driver that offers one)."""
    global _probe
    with _lock:
        if _probe is None:
            try:
                wgpu = _import_wgpu()
                wgpu.gpu.request_adapter_sync(power_preference="high-performance")
                _probe = ""
            except ImportError as exc:
                _probe = f"wgpu-py is not installed ({exc}); pip install 'pterun[webgpu]'"
            except Exception as exc:  # noqa: BLE001 - wgpu reports a missing adapter as RuntimeError
                _probe = f"no WebGPU adapter: {exc}"
        return _probe == ""


def unavailable_reason() -> str:
    available()
    return _probe or ""


class Gpu:
    """The device, its queue and a cache of compute pipelines."""

    def __init__(self) -> None:
        wgpu = _import_wgpu()
        self.wgpu = wgpu
        adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
        limits = adapter.limits
        wanted = {}
        # The defaults are what every WebGPU implementation must offer; take what the
        # adapter has for the two that bound tensor sizes and bindings per kernel.
        for key in (
            "max-storage-buffer-binding-size",
            "max-buffer-size",
            "max-storage-buffers-per-shader-stage",
        ):
            if key in limits:
                wanted[key] = limits[key]
        # Timestamp queries cost nothing until a pass asks for them; only profiled runs do (profile.py).
        features = ["timestamp-query"] if "timestamp-query" in adapter.features else []
        self.device = adapter.request_device_sync(required_features=features, required_limits=wanted)
        self.queue = self.device.queue
        self.timestamps = "timestamp-query" in self.device.features
        self.timestamp_period = _timestamp_period(self.queue) if self.timestamps else 1.0
        dl = self.device.limits
        self.max_binding = int(dl["max-storage-buffer-binding-size"])
        self.max_groups = int(dl["max-compute-workgroups-per-dimension"])
        self.param_align = max(int(dl["min-uniform-buffer-offset-alignment"]), 16)
        self._pipelines: dict[str, tuple] = {}
        self._plock = threading.Lock()
        flags = wgpu.BufferUsage
        self.STORAGE = flags.STORAGE | flags.COPY_DST | flags.COPY_SRC
        self.UNIFORM = flags.UNIFORM | flags.COPY_DST
        self.READBACK = flags.MAP_READ | flags.COPY_DST
        self.QUERY_RESOLVE = flags.QUERY_RESOLVE | flags.COPY_SRC

    def buffer(self, nbytes: int, usage: int, label: str = ""):
        # Zero-sized bindings are invalid; 16 bytes keeps every binding legal and aligned.
        return self.device.create_buffer(size=max(16, (nbytes + 15) & ~15), usage=usage, label=label)

    def pipeline(self, source: str):
        """(pipeline, bind group layout, binding count) for a WGSL compute shader with entry point ``main``.

        The layout is written out from the source's declarations rather than left to "auto", which
        drops bindings a specialization happens not to read and would make its bind groups invalid.
        """
        hit = self._pipelines.get(source)
        if hit is not None:
            return hit
        with self._plock:
            hit = self._pipelines.get(source)
            if hit is not None:
                return hit
            entries = []
            for m in _BINDING.finditer(source):
                kind = m.group(2).replace(" ", "")
                if kind == "uniform":
                    btype = "uniform"
                elif kind == "storage,read":
                    btype = "read-only-storage"
                else:
                    btype = "storage"
                entries.append(
                    {
                        "binding": int(m.group(1)),
                        "visibility": self.wgpu.ShaderStage.COMPUTE,
                        "buffer": {"type": btype},
                    }
                )
            try:
                module = self.device.create_shader_module(code=source)
                layout = self.device.create_bind_group_layout(entries=entries)
                pipeline = self.device.create_compute_pipeline(
                    layout=self.device.create_pipeline_layout(bind_group_layouts=[layout]),
                    compute={"module": module, "entry_point": "main"},
                )
            except Exception as exc:  # noqa: BLE001 - a shader the driver rejects is a delegate it cannot run
                raise DelegateInvalidCompatibility(f"WebGPU rejected a kernel: {exc}") from None
            hit = self._pipelines[source] = (pipeline, layout, len(entries))
            return hit

    @property
    def pipeline_count(self) -> int:
        return len(self._pipelines)


def _timestamp_period(queue) -> float:
    """Nanoseconds per timestamp tick. WebGPU defines timestamps in nanoseconds, but wgpu-native resolves
    raw ticks unless told to normalize them; wgpu-py does not wrap the query for the period, so it is asked
    of wgpu-native directly, and taken as 1 (WebGPU's unit) where that is not possible."""
    try:
        from wgpu.backends.wgpu_native._ffi import lib

        period = float(lib.wgpuQueueGetTimestampPeriod(queue._internal))
    except Exception:  # noqa: BLE001 - another wgpu-py layout or backend: WebGPU's nanoseconds
        return 1.0
    return period if period > 0 else 1.0


def gpu() -> Gpu:
    """The process's device, created on first use."""
    global _gpu
    if _gpu is None:
        if not available():
            raise NotFound(f"VulkanBackend: {unavailable_reason()}")
        with _lock:
            if _gpu is None:
                _gpu = Gpu()
    return _gpu
