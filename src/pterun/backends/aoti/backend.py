"""CudaBackend: the delegates ExecuTorch's own CUDA backend exports, run with PyTorch's AOTInductor runner.

``executorch.backends.cuda``'s ``CudaPartitioner`` hands a subgraph to AOTInductor, which compiles it
into a shared library of host code and GPU kernels; the library goes into the program's named data, its
weights into ``aoti_cuda_blob.ptd``, and the delegate's blob says where both are (manifest.py). At load,
for each delegate:

1. ``validate`` (before the method allocates anything, so a CPU-only machine says the same): the
   manifest is read, the library found and checked to be a shared object for this processor
   (elf.py), every weight found at its size;
2. ``init``: the library's kernels are checked against the GPU, its calls into the shim against this
   PyTorch; it is opened by PyTorch's runner with its container on the method's device, and each
   weight is copied to the device and bound as the container's constant of that name (runner.py).

A call hands the delegate's inputs, the method's own tensors in device memory, to the library as they
are; the library returns its outputs in memory of its own, which are copied into the method's outputs
(planned, or from the registered CUDA allocator, as the executor gave them). Everything is released with
the method: the container (its copy of the weights with it) and the library.

The library runs with the process's rights, so the executor loads a program with such a delegate only
when the caller trusts native code (``load_program(..., trust_native_code=True)``; docs/trust.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from pterun.backends.aoti import runner as aoti
from pterun.backends.aoti.elf import Library, read_library
from pterun.backends.aoti.manifest import Manifest, read_manifest
from pterun.backends.interface import BackendInitContext, BackendInterface, CompileSpec
from pterun.errors import DelegateInvalidCompatibility, InvalidProgram, PteError

BACKEND_ID = "CudaBackend"


@dataclass
class CudaDelegate:
    runner: Any  # torch._C._aoti.AOTIModelContainerRunnerCuda
    inputs: int
    outputs: int
    device: torch.device


@dataclass(frozen=True)
class _Blob:
    manifest: Manifest
    library: Library
    image: memoryview
    device: torch.device  # where the exporter compiled it for


class CudaBackend(BackendInterface):
    native_code = True

    def is_available(self) -> bool:
        return aoti.available()

    def validate(self, context: BackendInitContext, processed: memoryview,
                 compile_specs: tuple[CompileSpec, ...]) -> None:
        _read(context, processed, compile_specs)

    def init(self, context: BackendInitContext, processed: memoryview,
             compile_specs: tuple[CompileSpec, ...]) -> CudaDelegate:
        blob = _read(context, processed, compile_specs)
        device = context.device if context.device.type == "cuda" else blob.device
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
        if device.index >= torch.cuda.device_count():
            raise DelegateInvalidCompatibility(f"it runs on {device}; this machine has "
                                               f"{torch.cuda.device_count()} CUDA device(s)")
        major, minor = torch.cuda.get_device_capability(device)
        blob.library.check_runs_on(major * 10 + minor)
        aoti.check_symbols(blob.library)
        runner = aoti.open_runner(blob.image, device)
        inputs, outputs = aoti.call_counts(runner)
        try:
            aoti.bind_weights(runner, blob.manifest, context.named_data, device)
        except PteError:
            raise
        except RuntimeError as exc:  # the container refused a constant
            raise InvalidProgram(f"binding its weights failed: {_first_line(exc)}") from None
        return CudaDelegate(runner, inputs, outputs, device)

    def written_arguments(self, handle: CudaDelegate, args) -> list[int]:
        """Its outputs; the call must pass the library's inputs and outputs, as tensors on its device."""
        expected = handle.inputs + handle.outputs
        if len(args) != expected:
            raise InvalidProgram(f"its library takes {handle.inputs} inputs and returns "
                                 f"{handle.outputs} outputs; the call passes {len(args)} values")
        for i, arg in enumerate(args):
            if not isinstance(arg, torch.Tensor):
                raise InvalidProgram(f"argument {i} of the call is {type(arg).__name__}; the "
                                     "library takes and returns tensors only")
            if arg.device.type != "meta" and arg.device != handle.device:
                raise InvalidProgram(f"argument {i} of the call is on {arg.device}; the library "
                                     f"runs on {handle.device}")
        return list(range(handle.inputs, expected))

    def execute(self, handle: CudaDelegate, args: list) -> None:
        n = handle.inputs
        results = handle.runner.run(args[:n])
        for out, result in zip(args[n:], results):
            if out.shape != result.shape:
                out.resize_(result.shape)  # a dynamic output: within its planned bytes
            out.copy_(result)

    def destroy(self, handle: CudaDelegate) -> None:
        # The runner's destructor deletes the container (its constants with it) and closes the library.
        handle.runner = None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _read(context: BackendInitContext, processed: memoryview, compile_specs: tuple[CompileSpec, ...]) -> _Blob:
    """The blob's manifest, library and target device, each checked; nothing is loaded."""
    specs = {spec.key: spec.value for spec in compile_specs}
    try:
        method_name = specs.get("method_name", b"").decode("utf-8")
        target = torch.device(specs.get("target_device", b"cuda:0").decode("ascii"))
    except (UnicodeDecodeError, RuntimeError):
        raise InvalidProgram(f"its compile specs method_name {specs.get('method_name')!r} and "
                             f"target_device {specs.get('target_device')!r} are not a name and a device") from None
    if target.type != "cuda":
        raise DelegateInvalidCompatibility(f"it was compiled for {target}, not a CUDA device")
    manifest = read_manifest(processed, method_name)
    image = context.named_data.get(manifest.library)
    if image is None:
        raise InvalidProgram(f"its library is stored under {manifest.library!r}, which neither the "
                             "program's named data nor its data files hold")
    library = read_library(image)
    aoti.check_weights(manifest, context.named_data)
    return _Blob(manifest, library, image, target)
