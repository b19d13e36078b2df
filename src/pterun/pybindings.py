"""A drop-in for ``executorch.extension.pybindings.portable_lib``.

    from pterun import pybindings as portable_lib   # instead of executorch's

Same functions, classes, argument names and defaults, backed by pterun. The
differences are deliberate and listed in the README: methods loaded through
``_load_program`` each get their own planned memory instead of sharing one set
of arenas (so two methods cannot overwrite each other's state), list outputs
come back as Python lists instead of failing, a debug buffer too small for
a run's values raises ``MemoryAllocationFailed`` instead of aborting the
process (docs/profiling.md), bundled programs are verified when loaded
(docs/bundled.md), and a program whose delegate is native code (ExecuTorch's
``CudaBackend``) loads only with ``trust_native_code=True`` (docs/trust.md).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch

from pterun.bundled import BundledProgram as BundledModule
from pterun.enums import DEVICE_TYPE_LABELS
from pterun.errors import IndexOutOfRange, InvalidArgument, InvalidArgumentType, InvalidState, Unimplemented
from pterun.executor import Method, MethodMeta, Program, TensorInfo
from pterun.executor.call.inputs import is_sequence
from pterun.executor.call.threads import check_num_threads
from pterun.format import Verification
from pterun.format.source import read_source
from pterun.runtime import Runtime

__all__ = [
    "BundledModule", "ExecuTorchMethod", "ExecuTorchModule", "ExecuTorchProgram", "MethodMeta", "TensorInfo",
    "Verification",
    "_create_profile_block", "_dump_profile_results", "_get_operator_names", "_get_registered_backend_names",
    "_is_available", "_load_bundled_program_from_buffer", "_load_for_executorch",
    "_load_for_executorch_from_buffer", "_load_for_executorch_from_bundled_program",
    "_load_for_executorch_from_data_loader", "_load_program", "_load_program_from_buffer",
    "_reset_profile_results", "_threadpool_get_thread_count", "_unsafe_reset_threadpool",
]


def _convert_inputs(inputs: Sequence, method_name: str, entry: str, *, one_tensor: bool = False) -> list:
    """Checks inputs as ExecuTorch's bindings do, with their error types and messages.

    ``entry`` is the function called: its arguments must be a sequence (``TypeError`` otherwise, as
    pybind11 raises), or for ``__call__`` and ``call`` also one tensor. Each value must be exactly a
    ``torch.Tensor`` (not a subclass), None, a bool, an int or a float.
    """
    if one_tensor and isinstance(inputs, torch.Tensor):
        inputs = [inputs]
    elif type(inputs) is not list and type(inputs) is not tuple and not is_sequence(inputs):
        accepted = "a sequence of inputs or one tensor" if one_tensor else "a sequence of inputs"
        raise InvalidArgumentType(
            f"{entry}(): incompatible function arguments. The inputs must be {accepted}; "
            f"invoked with {type(inputs)}"
        )
    converted: list = []
    for i, value in enumerate(inputs):
        if type(value) is torch.Tensor:
            if value.numel() != 0 and value.device.type not in DEVICE_TYPE_LABELS:
                raise InvalidArgument(
                    f"Input {i} for method {method_name} is on device {value.device}, "
                    "and only CPU and CUDA tensors can be passed to a method."
                )
            converted.append(value)
        elif value is None or isinstance(value, (bool, int, float)):
            converted.append(value)
        else:
            raise InvalidArgument(
                f"Unsupported python type {type(value)}. Ensure that inputs are passed as a flat list of tensors."
            )
    return converted


def _verification(value) -> Verification:
    return Verification(int(value))


def _data_sources(data) -> list:
    return [] if data is None else [data]


class ExecuTorchMethod:
    def __init__(self, method: Method) -> None:
        self._method = method

    def set_inputs(self, inputs: Sequence[Any]) -> None:
        self._method.set_inputs(_convert_inputs(inputs, self._method.name, "set_inputs"))

    def execute(self) -> None:
        self._method.run()

    def get_outputs(self, clone_outputs: bool = True) -> list[Any]:
        return self._method.get_outputs(clone_outputs)

    def call(self, inputs: Sequence[Any] = (), clone_outputs: bool = True) -> list[Any]:
        return self._call(inputs, clone_outputs, "call")

    def __call__(self, inputs: Sequence[Any] = (), clone_outputs: bool = True) -> list[Any]:
        return self._call(inputs, clone_outputs, "__call__")

    def _call(self, inputs, clone_outputs: bool, entry: str) -> list[Any]:
        # One atomic call of the method (see docs/threads.md), where ExecuTorch makes three.
        converted = _convert_inputs(inputs, self._method.name, entry, one_tensor=True)
        return self._method.execute(converted, clone_outputs=clone_outputs)

    def method_meta(self) -> MethodMeta:
        return self._method.metadata

    def get_attribute(self, name: str) -> Any:
        return self._method.get_attribute(name)


class ExecuTorchProgram:
    def __init__(self, program: Program) -> None:
        self._program = program
        self._names = program.file.method_names

    def num_methods(self) -> int:
        return len(self._names)

    def get_method_name(self, method_index: int) -> str:
        if not 0 <= method_index < len(self._names):
            raise IndexOutOfRange(f"method index {method_index} is out of range; the program has {len(self._names)}")
        return self._names[method_index]

    def load_method(self, method_name: str) -> ExecuTorchMethod:
        return ExecuTorchMethod(self._program.load_method(method_name))

    @property
    def program(self) -> Program:
        """The pterun Program this mirrors (pterun's own: ExecuTorch's binding has no such attribute)."""
        return self._program

    def method_meta(self, method_name: str) -> MethodMeta:
        return self._program.metadata(method_name)

    def has_etdump(self) -> bool:
        return self._program.has_etdump()

    def write_etdump_result_to_file(self, path: str, debug_buffer_path: str | None = None) -> None:
        self._program.write_etdump_result_to_file(path, debug_buffer_path)


class ExecuTorchModule:
    """A program loaded on first use, running methods by name (ExecuTorch's ``Module``)."""

    def __init__(self, source, data, verification: Verification, num_threads: int | None = None,
                 enable_etdump: bool = False, debug_buffer_size: int = 0, trust_native_code: bool = False) -> None:
        self._source = source
        self._trust_native_code = bool(trust_native_code)
        self._data = data
        self._verification = verification
        self._num_threads = num_threads
        self._etdump = (bool(enable_etdump), _debug_buffer_size(debug_buffer_size))
        self._program: Program | None = None

    @property
    def program(self) -> Program:
        """The pterun Program this module runs, loaded on first use (pterun's own: ExecuTorch's has none)."""
        return self._loaded()

    def _loaded(self) -> Program:
        if self._program is None:
            enable_etdump, debug_buffer_size = self._etdump
            # A module's methods keep their own state, as ExecuTorch's modules' do (pterun/executor/load/shared.py).
            self._program = Runtime.get().load_program(
                self._source, verification=self._verification, data_path=self._data, num_threads=self._num_threads,
                enable_etdump=enable_etdump, debug_buffer_size=debug_buffer_size, share_state=False,
                trust_native_code=self._trust_native_code,
            )
        return self._program

    def _run(self, method_name: str, inputs: list, clone_outputs: bool) -> list[Any]:
        return self._loaded().load_method(method_name).execute(inputs, clone_outputs=clone_outputs)

    def run_method(self, method_name: str, inputs: Sequence[Any] = (), clone_outputs: bool = True) -> list[Any]:
        return self._run(method_name, _convert_inputs(inputs, method_name, "run_method"), clone_outputs)

    def forward(self, inputs: Sequence[Any] = (), clone_outputs: bool = True) -> list[Any]:
        return self._run("forward", _convert_inputs(inputs, "forward", "forward"), clone_outputs)

    def __call__(self, inputs: Any = (), clone_outputs: bool = True) -> list[Any]:
        return self._run("forward", _convert_inputs(inputs, "forward", "__call__", one_tensor=True), clone_outputs)

    def plan_execute(self, method_name: str, clone_outputs: bool = True) -> list[Any]:
        """Runs the method with the inputs it was last given (``InvalidArgument`` when it has none yet).

        ExecuTorch's method keeps pointers to the caller's unplanned inputs after ``forward`` returns, so
        its ``plan_execute`` may read freed memory; pterun's keeps the tensors themselves (docs/bundled.md).
        """
        method = self._loaded().load_method(method_name)
        method.run()
        return method.get_outputs(clone_outputs)

    def method_meta(self, method_name: str) -> MethodMeta:
        return self._loaded().metadata(method_name)

    def method_names(self) -> list[str]:
        return list(self._loaded().file.method_names)

    def has_etdump(self) -> bool:
        return self._etdump[0]

    def write_etdump_result_to_file(self, path: str, debug_buffer_path: str | None = None) -> None:
        """Writes what loading and running recorded since the last write (ExecuTorch's Module does the same);
        nothing before the program was first used."""
        if not self._etdump[0]:
            raise InvalidState("no ETDump: the module was not loaded with enable_etdump=True")
        if self._program is not None:
            self._program.write_etdump_result_to_file(path, debug_buffer_path)


def _load_for_executorch(
    program_path: str | os.PathLike,
    data_path: str | None = None,
    enable_etdump: bool = False,
    debug_buffer_size: int = 0,
    program_verification: Verification = Verification.InternalConsistency,
    *,
    num_threads: int | None = None,
    trust_native_code: bool = False,
) -> ExecuTorchModule:
    # As ExecuTorch's Module, the files are opened now (a missing one fails here, with AccessFailed) and
    # the program is read on first use.
    source = read_source(os.fspath(program_path))
    data = [read_source(os.fspath(path), what="data file") for path in _data_sources(data_path)]
    return ExecuTorchModule(source, data, _verification(program_verification), check_num_threads(num_threads),
                            enable_etdump, debug_buffer_size, trust_native_code)


def _load_for_executorch_from_buffer(
    buffer: bytes,
    data_map_buffer: bytes | None = None,
    enable_etdump: bool = False,
    debug_buffer_size: int = 0,
    program_verification: Verification = Verification.InternalConsistency,
    *,
    num_threads: int | None = None,
    trust_native_code: bool = False,
) -> ExecuTorchModule:
    return ExecuTorchModule(bytes(buffer), _data_sources(data_map_buffer), _verification(program_verification),
                            check_num_threads(num_threads), enable_etdump, debug_buffer_size, trust_native_code)


def _load_program(
    path: str | os.PathLike,
    enable_etdump: bool = False,
    debug_buffer_size: int = 0,
    program_verification: Verification = Verification.Minimal,
    data_path: str | None = None,
    *,
    num_threads: int | None = None,
    trust_native_code: bool = False,
) -> ExecuTorchProgram:
    return _program(os.fspath(path), program_verification, data_path, num_threads, enable_etdump, debug_buffer_size,
                    trust_native_code)


def _load_program_from_buffer(
    buffer: bytes,
    enable_etdump: bool = False,
    debug_buffer_size: int = 0,
    program_verification: Verification = Verification.Minimal,
    data_path: str | None = None,
    *,
    num_threads: int | None = None,
    trust_native_code: bool = False,
) -> ExecuTorchProgram:
    return _program(bytes(buffer), program_verification, data_path, num_threads, enable_etdump, debug_buffer_size,
                    trust_native_code)


def _program(source, program_verification: Verification, data_path: str | None, num_threads: int | None,
             enable_etdump: bool, debug_buffer_size: int, trust_native_code: bool) -> ExecuTorchProgram:
    program = Runtime.get().load_program(source, verification=_verification(program_verification), data_path=data_path,
                                         num_threads=num_threads, enable_etdump=bool(enable_etdump),
                                         debug_buffer_size=_debug_buffer_size(debug_buffer_size),
                                         trust_native_code=trust_native_code)
    return ExecuTorchProgram(program)


def _debug_buffer_size(size) -> int:
    # pybind11 converts the argument to size_t: a negative size or a non-integer is a TypeError there.
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise InvalidArgumentType(f"debug_buffer_size must be a non-negative int, got {size!r}")
    return size


def _load_for_executorch_from_bundled_program(
    ptr: BundledModule,
    data_map_buffer: bytes | str | os.PathLike | None = None,
    enable_etdump: bool = False,
    debug_buffer_size: int = 0,
    *,
    data_path: str | os.PathLike | None = None,
    trust_native_code: bool = False,
) -> ExecuTorchModule:
    """The program a bundled module holds, as a module whose methods run normally (without its test cases).

    As ExecuTorch's two overloads, the second argument is a .ptd's bytes or its path (``data_path=``).
    """
    if not isinstance(ptr, BundledModule):
        raise InvalidArgumentType(f"_load_for_executorch_from_bundled_program(): expected a BundledModule, "
                                  f"got {type(ptr).__name__}")
    data = data_path if data_path is not None else data_map_buffer
    if isinstance(data, (str, os.PathLike)):
        data = read_source(os.fspath(data), what="data file")
    return _load_for_executorch_from_buffer(ptr.file.program, data, enable_etdump,  # type: ignore[arg-type]
                                            debug_buffer_size, trust_native_code=trust_native_code)


def _load_bundled_program_from_buffer(buffer: bytes, non_const_pool_size: int = 16 * 1024) -> BundledModule:
    """A bundled program (.bpte), verified now. ``non_const_pool_size`` is accepted and unused, as in ExecuTorch."""
    if not isinstance(buffer, (bytes, bytearray, memoryview)):
        raise InvalidArgumentType(f"_load_bundled_program_from_buffer(): expected bytes, got {type(buffer).__name__}")
    return BundledModule(bytes(buffer))


def _load_for_executorch_from_data_loader(*args, **kwargs) -> ExecuTorchModule:
    raise Unimplemented("custom data loaders are not supported by pterun; pass a path or bytes")


def _get_operator_names() -> list[str]:
    return sorted(Runtime.get().registries.kernels.names)


def _get_registered_backend_names() -> list[str]:
    return Runtime.get().registries.backends.names


def _is_available(backend_name: str) -> bool:
    return Runtime.get().registries.backends.is_available(backend_name)


def _create_profile_block(name: str) -> None:
    """Profiling blocks are accepted and ignored: pterun has no ExecuTorch profiler."""


def _dump_profile_results() -> bytes:
    return b""


def _reset_profile_results() -> None:
    """Nothing to reset (see ``_create_profile_block``)."""


def _unsafe_reset_threadpool(num_threads: int) -> None:
    # Kernels run on PyTorch's intra-op thread pool; methods of a program loaded with num_threads keep theirs.
    torch.set_num_threads(int(num_threads))


def _threadpool_get_thread_count() -> int:
    return torch.get_num_threads()
