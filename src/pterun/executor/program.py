"""Program: a loaded .pte file, its data files, and the methods loaded from it."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from pterun.core.collection import collector_held_off
from pterun.core.device import Device
from pterun.errors import InvalidState
from pterun.executor.call.method import Method
from pterun.executor.context import LoadContext, Registries
from pterun.executor.load.data import ProgramData
from pterun.executor.load.shared import SharedArenas
from pterun.executor.meta import MethodMeta
from pterun.executor.options import NAMES as OPTION_NAMES
from pterun.executor.options import LoadOptions
from pterun.format import DataFile, ProgramFile


class Program:
    """A loaded program (``Runtime.load_program``): its methods, loaded on first use, and their metadata.

    ``Program(file, registries, data_files, device, ...)`` takes :class:`LoadOptions`' fields, positionally after
    ``data_files`` or by name, or ``options=`` whole; each option also reads as an attribute (``program.device``).
    """

    def __init__(self, file: ProgramFile, registries: Registries, data_files: Sequence[DataFile] = (), *args: Any,
                 options: LoadOptions | None = None, **kwargs: Any) -> None:
        if options is not None and (args or kwargs):
            raise TypeError("Program takes options= or the options one by one, not both")
        self.file = file
        self.registries = registries
        self.data_files = data_files
        self.options = options if options is not None else LoadOptions(*args, **kwargs)
        self._methods: dict[str, Method] = {}
        self._lock = threading.RLock()
        self.data = ProgramData(self.file, self.data_files, self.registries.allocators)
        self.named_data = self.data.named_data
        shared = SharedArenas(self.file, self.registries.allocators) if self.options.share_state else None
        self._context = LoadContext(self.registries, self.data, self.options, self.load_nested, shared)

    def __getattr__(self, name: str) -> Any:
        if name in OPTION_NAMES:
            return getattr(self.options, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

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

    @collector_held_off()
    def _load(self, name: str, context: LoadContext | None = None) -> Method:
        context = context or self._context
        if self.options.trace is None:
            return Method(context, self.file.plan(name))
        start = time.perf_counter_ns()
        plan = self.file.plan(name)
        init = time.perf_counter_ns()
        method = Method(context, plan)
        self.options.trace.loaded(start, init, time.perf_counter_ns())
        return method

    # -- profiling ---------------------------------------------------------------

    def has_etdump(self) -> bool:
        return self.options.trace is not None

    def write_etdump_result_to_file(self, etdump_path: str | os.PathLike,
                                    debug_buffer_path: str | os.PathLike | None = None) -> None:
        """Writes the ETDump of everything recorded since the last write (loads and runs), and the debug
        buffer when one was asked for at load; then starts afresh. Nothing is written when nothing was
        recorded. ``InvalidState`` when the program was not loaded with ``enable_etdump=True``."""
        trace = self.options.trace
        if trace is None:
            raise InvalidState("no ETDump: the program was not loaded with enable_etdump=True")
        trace.write(os.fspath(etdump_path), None if debug_buffer_path is None else os.fspath(debug_buffer_path))

    def metadata(self, name: str) -> MethodMeta:
        return MethodMeta(self.file.plan(name))

    def load_nested(self, data, device) -> Program:
        """A program carried inside this one (a delegate blob), run by the same executor on ``device``."""
        # The outer method captures the whole call, nested program included.
        # Profiling, torch.compile, backend options and unshared state stay the outer program's own.
        options = replace(self.options, device=Device.parse(device), backend_options={}, cuda_graphs=False,
                          compile=False, trace=None, share_state=True)
        return Program(ProgramFile(bytes(data)), self.registries, options=options)
