"""Program: a loaded .pte file, its data files, and the methods loaded from it."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from pterun.core.device import Device
from pterun.errors import InvalidState
from pterun.executor.cache import LoadCache
from pterun.executor.context import LoadContext, Registries
from pterun.executor.data import ProgramData
from pterun.executor.etdump import ProgramTrace
from pterun.executor.meta import MethodMeta
from pterun.executor.method import Method
from pterun.executor.shared import SharedArenas
from pterun.format import DataFile, ProgramFile


@dataclass
class Program:
    """A loaded program (``Runtime.load_program``): its methods, loaded on first use, and their metadata."""

    file: ProgramFile
    registries: Registries
    data_files: Sequence[DataFile] = ()
    device: Device | None = None  # run every method on this device, whatever the plan says
    backend_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    cuda_graphs: bool = True  # replay CUDA methods as captured graphs (executor/graphs.py)
    compile: bool = False  # run methods through torch.compile (executor/functional.py)
    allow_tf32: bool = False  # float32 products and convolutions may use TF32 on CUDA (executor/precision.py)
    fuse: bool = True  # decomposed chains run as one kernel each (executor/fuse/)
    num_threads: int | None = None  # intra-op threads per call; None: chosen per method (executor/threads.py)
    cache: LoadCache | None = None  # compiled code kept between loads (executor/cache.py)
    trace: ProgramTrace | None = None  # profiling: every run's events (and values) for an ETDump (executor/etdump.py)
    device_positions: bool | None = None  # start positions stay on the device (executor/fuse/positions.py)
    share_state: bool = True  # methods share the state planned for sharing (executor/shared.py)
    trust_native_code: bool = False  # delegates that load native code from the file may (docs/trust.md)

    def __post_init__(self) -> None:
        self._methods: dict[str, Method] = {}
        self._lock = threading.RLock()
        self.data = ProgramData(self.file, self.data_files, self.registries.allocators)
        self.named_data = self.data.named_data
        shared = SharedArenas(self.file, self.registries.allocators) if self.share_state else None
        self._context = LoadContext(self.registries, self.data, self.device, self.backend_options, self.load_nested,
                                    self.compile, self.cuda_graphs, self.allow_tf32, self.cache, self.fuse,
                                    self.num_threads, self.trace, self.device_positions, shared,
                                    self.trust_native_code)

    # -- methods -----------------------------------------------------------------

    @property
    def method_names(self) -> set[str]:
        return set(self.file.method_names)

    def load_method(self, name: str, *, cached: bool = True) -> Method:
        """The method ``name``, loaded on first use and the same object on every later call.

        ``cached=False`` loads a new, independent method every time: its own planned memory (the state the
        program's methods share included), delegate state and compiled function, sharing only the program's
        read-only constants. Give each thread
        its own (see docs/threads.md); a method holds state (inputs, outputs, mutable buffers such as a
        KV cache) that one call at a time can use.
        """
        if not cached:
            return self._load(name, replace(self._context, shared=None))
        with self._lock:
            method = self._methods.get(name)
            if method is None:
                method = self._load(name)
                self._methods[name] = method
            return method

    def _load(self, name: str, context: LoadContext | None = None) -> Method:
        context = context or self._context
        if self.trace is None:
            return Method(context, self.file.plan(name))
        start = time.perf_counter_ns()
        plan = self.file.plan(name)
        init = time.perf_counter_ns()
        method = Method(context, plan)
        self.trace.loaded(start, init, time.perf_counter_ns())
        return method

    # -- profiling ---------------------------------------------------------------

    def has_etdump(self) -> bool:
        return self.trace is not None

    def write_etdump_result_to_file(self, etdump_path: str | os.PathLike,
                                    debug_buffer_path: str | os.PathLike | None = None) -> None:
        """Writes the ETDump of everything recorded since the last write (loads and runs), and the debug
        buffer when one was asked for at load; then starts afresh. Nothing is written when nothing was
        recorded. ``InvalidState`` when the program was not loaded with ``enable_etdump=True``."""
        if self.trace is None:
            raise InvalidState("no ETDump: the program was not loaded with enable_etdump=True")
        self.trace.write(os.fspath(etdump_path), None if debug_buffer_path is None else os.fspath(debug_buffer_path))

    def metadata(self, name: str) -> MethodMeta:
        return MethodMeta(self.file.plan(name))

    def load_nested(self, data, device) -> Program:
        """A program carried inside this one (a delegate blob), run by the same executor on ``device``."""
        # The outer method captures the whole call, nested program included.
        return Program(ProgramFile(bytes(data)), self.registries, device=Device.parse(device), cuda_graphs=False,
                       allow_tf32=self.allow_tf32, fuse=self.fuse, num_threads=self.num_threads,
                       cache=self.cache, trace=None, device_positions=self.device_positions,
                       trust_native_code=self.trust_native_code)
