"""The Runtime facade, mirroring ``executorch.runtime``.

``Runtime.get()`` is a process-wide singleton that owns the kernel, backend
and allocator registries; ``load_program`` reads a program from a path
(memory-mapped), bytes or a binary file object.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

import torch

from pterun.backends import BackendRegistry, default_backend_registry
from pterun.core.collection import collector_held_off
from pterun.core.device import Device, DeviceType
from pterun.executor import Method, MethodMeta, Program, Registries
from pterun.executor.cache import LoadCache
from pterun.executor.call.threads import check_num_threads
from pterun.executor.etdump import ProgramTrace
from pterun.executor.options import LoadOptions
from pterun.format import DataFile, ProgramFile, Verification
from pterun.kernels import KernelRegistry, default_registry
from pterun.memory import AllocatorRegistry


def default_allocators() -> AllocatorRegistry:
    """The built-in allocators, registered in this one place. CUDA's is made on first use."""
    from pterun.memory.cpu import CpuAllocator

    registry = AllocatorRegistry()
    registry.register(CpuAllocator())

    def cuda():
        from pterun.memory.cuda import CudaAllocator

        return CudaAllocator()

    registry.register_lazy(DeviceType.CUDA, cuda)
    return registry


class BackendRegistryView:
    """``Runtime.backend_registry`` as executorch.runtime has it."""

    def __init__(self, registry: BackendRegistry) -> None:
        self._registry = registry

    @property
    def registered_backend_names(self) -> list[str]:
        return self._registry.names

    def is_available(self, backend_name: str) -> bool:
        return self._registry.is_available(backend_name)

    def register(self, name: str, backend) -> None:
        self._registry.register(name, backend)


class OperatorRegistryView:
    """``Runtime.operator_registry`` as executorch.runtime has it."""

    def __init__(self, registry: KernelRegistry) -> None:
        self._registry = registry

    @property
    def operator_names(self) -> set[str]:
        return self._registry.names


class Runtime:
    """The kernel, backend and allocator registries, and ``load_program``; ``Runtime.get()`` is the process's."""

    def __init__(self, registries: Registries | None = None) -> None:
        self.registries = registries or Registries(default_registry(), default_backend_registry(), default_allocators())
        self.backend_registry = BackendRegistryView(self.registries.backends)
        self.operator_registry = OperatorRegistryView(self.registries.kernels)

    @staticmethod
    @functools.cache
    def get() -> Runtime:
        """The process-wide runtime, made on first use (as ``executorch.runtime.Runtime.get()``)."""
        return Runtime()

    @property
    def allocators(self) -> AllocatorRegistry:
        return self.registries.allocators

    @collector_held_off()
    def load_program(
        self,
        data: bytes | bytearray | memoryview | BinaryIO | Path | str,
        *,
        verification: Verification = Verification.InternalConsistency,
        enable_etdump: bool = False,
        debug_buffer_size: int = 0,
        data_path: str | os.PathLike | bytes | Sequence | None = None,
        device: str | torch.device | Device | None = None,
        backend_options: Mapping[str, Mapping[str, Any]] | None = None,
        cuda_graphs: bool = True,
        compile: bool = False,
        allow_tf32: bool = False,
        fuse: bool = True,
        num_threads: int | None = None,
        cache_dir: str | os.PathLike | bool | None = None,
        device_positions: bool | None = None,
        share_state: bool = True,
        trust_native_code: bool = False,
    ) -> Program:
        """Loads a program; ``data_path`` names .ptd files (paths or bytes) holding tensors it stores outside.

        ``device`` runs every method on that device ("cuda", "cuda:1"): arenas
        and constants are placed there and kernels run there. On a CUDA device
        each method is captured as a CUDA graph and replayed (``cuda_graphs=False``
        runs it kernel by kernel instead). ``compile=True`` hands each method,
        rewritten as a pure function, to ``torch.compile`` (TorchInductor fuses
        its elementwise chains); methods it cannot express run as usual, and
        ``Method.compile_status`` says why. A method compiles on its first call, or,
        when its inputs can change shape, each set of input shapes once it comes
        twice in a row (a language model's one-token step; its prompts run uncompiled,
        as the method's own generated code).

        Float32 is computed in float32 whatever precision switches the process
        has set (``torch.set_float32_matmul_precision``, cuDNN's TF32, autocast);
        ``allow_tf32=True`` lets float32 matrix products and convolutions on CUDA
        use TF32 instead (faster, about 1e-3 relative error; docs/precision.md).

        Attention, RMSNorm and (where the device has a kernel) a SwiGLU MLP,
        which the exporter decomposes into chains of kernels, run as one fused
        kernel each (rounding differs slightly; docs/precision.md);
        ``fuse=False`` runs every instruction as the file has it.

        On a CUDA device, the start position an LLM exporter reads to the host
        (``aten::_local_scalar_dense`` feeding ``llama::update_cache``,
        ``llama::custom_sdpa`` and a slice of the RoPE tables) stays in device
        memory, so the method has no host read and a CUDA graph can hold it
        (docs/llm.md); ``device_positions=False`` keeps the reads, ``True`` also
        rewrites them on the CPU.

        ``num_threads`` is how many intra-op threads each call runs on, set for the
        calling thread only and put back when the call returns. The default chooses
        per method: one thread when every operator is small, else the calling
        thread's ``torch.get_num_threads()``; no call runs more threads than there
        are free cores (``Method.num_threads``, docs/threads.md).

        ``enable_etdump=True`` records what each load and run does, as ExecuTorch's runtime records it, for
        ``Program.write_etdump_result_to_file`` to write as an ETDump that ExecuTorch's Inspector reads: a
        span per instruction and per node inside pterun's XNNPACK and WebGPU delegates, and with
        ``debug_buffer_size`` bytes for them, the values each one computed. Such a program runs every
        instruction as the file has it (no fused chains, no CUDA graph, no ``compile``); without it
        nothing is recorded and nothing costs anything (docs/profiling.md).

        A program exported with shared mutable state (``MemoryPlanningPass(share_mutable_buffers=True)``: a
        ``write`` and a ``read`` method over one state buffer) has its methods share that state, as
        ExecuTorch's ``executorch.runtime`` programs do; ``share_state=False`` gives each method its own, as
        ExecuTorch's pybindings modules do (docs/threads.md).

        ``trust_native_code=True`` lets delegates whose blobs are native code load it into this process: the
        compiled libraries of ExecuTorch's own CUDA backend (``CudaBackend``) run with the process's rights,
        as any library it imports does. Without it such a method is refused (``NativeCodeNotTrusted``)
        before anything is loaded for it; every other delegate and every operator are data pterun
        interprets, and need no trust (docs/trust.md).

        What loading derives and can keep (each method's compiled code, which program bytes passed the
        verifier) is kept in ``cache_dir``: by default $PTERUN_CACHE_DIR, else $XDG_CACHE_HOME/pterun or
        ~/.cache/pterun; ``cache_dir=False`` (or PTERUN_CACHE_DIR=off) keeps nothing (docs/cache.md).
        """
        num_threads = check_num_threads(num_threads)
        cache = LoadCache.from_option(cache_dir)
        file = ProgramFile(data, Verification(verification), marks=cache)
        sources: list
        if data_path is None:
            sources = []
        elif isinstance(data_path, (list, tuple)):
            sources = list(data_path)
        else:
            sources = [data_path]
        data_files = [DataFile(source) for source in sources]
        options = LoadOptions(
            device=None if device is None else Device.parse(device),
            backend_options=dict(backend_options or {}),
            cuda_graphs=cuda_graphs,
            compile=compile,
            allow_tf32=allow_tf32,
            fuse=fuse,
            num_threads=num_threads,
            cache=cache,
            trace=ProgramTrace(int(debug_buffer_size)) if enable_etdump else None,
            device_positions=device_positions,
            share_state=share_state,
            trust_native_code=bool(trust_native_code),
        )
        return Program(file, self.registries, data_files, options=options)

__all__ = ["Method", "MethodMeta", "Program", "Runtime", "Verification"]
