"""An AOTInductor library loaded into this process and run with PyTorch's own runner for such libraries.

``torch._C._aoti.AOTIModelContainerRunnerCuda`` is what ``torch._inductor.aot_load`` uses: it opens the
library, creates its model container on a device, binds constants by name and runs it, passing tensors
across the library's C interface as PyTorch's own tensor handles. The library's calls into the shim
(``aoti_torch_empty_strided``, ...) then reach the libtorch this process imported, so its outputs and
scratch memory come from PyTorch's CUDA allocator and it runs on the caller's current stream (which is
what lets the executor capture a whole method, delegate included, as one CUDA graph).

Two things ExecuTorch's export does differently from ``aot_load``'s, handled here:

- its libraries do not link libtorch (``aot_inductor.link_libtorch=False``): their ``aoti_torch_*``
  and CUDA runtime references are left to the process's global symbols. Python imports torch with
  ``RTLD_LOCAL``, so the libraries torch already loaded are reopened once with ``RTLD_GLOBAL`` (and
  ``RTLD_NOLOAD``: nothing new is loaded), the first time a library needs them;
- their weights are not in the library: each is a named storage (the manifest, manifest.py), copied to
  the device and bound to the container's constants of that name.

The library is written to a file of its own, in a directory only this user can enter, named uniquely for
the process (the dynamic loader takes a library already loaded under the same name for the same one),
and removed as soon as it is loaded.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import os
import re
import tempfile
import warnings
from collections.abc import Mapping

import torch

from pterun.backends.aoti.elf import Library
from pterun.backends.aoti.manifest import CUDA, Manifest, Weight
from pterun.core.dtype import to_torch
from pterun.errors import DelegateInvalidCompatibility, InvalidExternalData, InvalidProgram

# The libraries whose exports ExecuTorch's libraries call: the shim (libtorch_cpu, and libtorch_cuda for its
# CUDA kernels) and the CUDA runtime.
_EXPOSED = re.compile(r"lib(torch_cpu|torch_cuda|c10|c10_cuda|cudart)\.so(\.[0-9.]+)?$")
_NEEDED_PREFIXES = ("aoti_torch_", "cuda")
# Kernels of ExecuTorch's own CUDA runtime, which no PyTorch provides.
_EXECUTORCH_ONLY = re.compile(r"aoti_torch_cuda_int[0-9]+_plain_mm|aoti_torch_cuda_randint_low_out")
_names = itertools.count()


def available() -> bool:
    return torch.cuda.is_available() and hasattr(torch._C._aoti, "AOTIModelContainerRunnerCuda")


@functools.cache
def _expose_torch() -> tuple[str, ...]:
    """Adds the libraries of PyTorch this process loaded (and the CUDA runtime) to the global symbol scope."""
    exposed = []
    with open("/proc/self/maps") as maps:
        paths = {line.split(None, 5)[5].strip() for line in maps if line.count(" ") >= 5 and "/" in line}
    for path in sorted(paths):
        if _EXPOSED.search(os.path.basename(path)) and os.path.exists(path):
            ctypes.CDLL(path, mode=os.RTLD_GLOBAL | os.RTLD_NOLOAD)
            exposed.append(path)
    return tuple(exposed)


def check_symbols(library: Library) -> None:
    """``DelegateInvalidCompatibility`` when the library calls shim or runtime functions this process lacks."""
    _expose_torch()
    scope = ctypes.CDLL(None)
    missing = []
    for name in sorted(library.undefined):
        if name.startswith(_NEEDED_PREFIXES) and name.isidentifier():
            try:
                scope[name]
            except AttributeError:
                missing.append(name)
    if missing:
        own = [n for n in missing if _EXECUTORCH_ONLY.fullmatch(n)]
        hint = (f" ({', '.join(own)}: kernels of ExecuTorch's own CUDA runtime, which PyTorch does not have)"
                if own else "")
        raise DelegateInvalidCompatibility(
            f"its library calls {', '.join(missing[:8])}{' ...' if len(missing) > 8 else ''}, which "
            f"this process's PyTorch {torch.__version__} does not provide{hint}"
        )


def open_runner(image: memoryview, device: torch.device):
    """The library in ``image`` opened by PyTorch's runner, its container made on ``device``."""
    directory = tempfile.mkdtemp(prefix="pterun-aoti-")
    path = os.path.join(directory, f"library-{os.getpid()}-{next(_names)}.so")
    try:
        with open(path, "wb") as file:
            file.write(image)
        try:
            return _runner(path, device)
        except (RuntimeError, OSError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise DelegateInvalidCompatibility(f"its library does not load: {first}") from None
    finally:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        os.rmdir(directory)


def _runner(path: str, device: torch.device):
    runner = torch._C._aoti.AOTIModelContainerRunnerCuda
    try:
        # One model in the container, run single-threaded: no container lock and no events, so a call is only
        # kernel launches on the current stream (capturable), as torch.compile's AOT path runs them.
        return runner(path, 1, str(device), "", True)  # type: ignore[call-overload]  # PyTorch's stub lags
    except TypeError:  # a PyTorch whose runner has no single-threaded mode
        return runner(path, 1, str(device), "")


def call_counts(runner) -> tuple[int, int]:
    """(inputs, outputs) of the library's entry point, from the call spec it was compiled with."""
    from torch.utils import _pytree

    try:
        in_spec, out_spec = runner.get_call_spec()
        return _pytree.treespec_loads(in_spec).num_leaves, _pytree.treespec_loads(out_spec).num_leaves
    except Exception as exc:  # noqa: BLE001 - any failure to read the spec is the library's
        raise DelegateInvalidCompatibility(f"its library's call spec cannot be read ({exc})") from None


def bind_weights(runner, manifest: Manifest, named_data: Mapping[str, memoryview], device: torch.device) -> None:
    """Makes each weight the container's constant of that name.

    Each is staged on its device and handed over as not user-managed: the container copies it into
    constant memory of its own (which is why a buffer the library updates, such as a KV cache, is the
    container's, and each method's container has its own), and the staged tensor is freed on return."""
    names: dict[str, str] = runner.get_constant_names_to_original_fqns()  # the library's name -> the model's
    dtypes: dict[str, int] = runner.get_constant_names_to_dtypes()
    by_fqn: dict[str, list[str]] = {}
    for name, fqn in names.items():
        by_fqn.setdefault(fqn, []).append(name)
    listed = {w.fqn for w in manifest.weights}
    unlisted = sorted(fqn for fqn in by_fqn if fqn not in listed)
    if unlisted:
        raise InvalidProgram(f"its library has constants the blob gives no weights for: "
                             f"{', '.join(map(repr, unlisted[:8]))}")
    constants: dict[str, torch.Tensor] = {}
    for w in manifest.weights:
        internal = by_fqn.get(w.fqn)
        if not internal:
            raise InvalidProgram(f"weight {w.fqn!r} is no constant of its library; it has "
                                 f"{', '.join(map(repr, sorted(by_fqn)[:8])) or 'none'}")
        wrong = [n for n in internal if dtypes.get(n) != w.dtype]
        if wrong:
            raise InvalidProgram(f"weight {w.fqn!r} has dtype {w.dtype}; its library's constant "
                                 f"{wrong[0]!r} has dtype {dtypes.get(wrong[0])}")
        tensor = _materialize(w, named_data[w.key], device)
        for name in internal:
            constants[name] = tensor
    if constants:
        # (user_managed=True would keep the handles PyTorch's binding makes for the call, which die with it.)
        runner.update_constant_buffer(constants, False, True)


def _materialize(w: Weight, data: memoryview, device: torch.device) -> torch.Tensor:
    """The weight on its device, with its sizes and strides, starting at its storage's first byte.

    The container copies a constant's storage from its first element for the storage's size, and makes
    its own tensor there with the offset given: so the bytes before the weight's offset are left out, and
    the tensor handed over has offset 0."""
    dtype = to_torch(w.dtype)
    target = device if w.device == CUDA else torch.device("cpu")
    item = torch.empty(0, dtype=dtype).element_size()
    start = min(w.offset * item, w.nbytes)
    count = (w.nbytes - start) // item * item
    if count == 0:
        return torch.empty_strided(w.sizes, w.strides, dtype=dtype, device=target)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # read-only bytes: they are only copied
        host = torch.frombuffer(data, dtype=torch.uint8, count=count, offset=start)
    return host.to(target, copy=True).view(dtype).as_strided(w.sizes, w.strides, 0)


def check_weights(manifest: Manifest, named_data: Mapping[str, memoryview]) -> None:
    """Every weight's storage is in the named data, at the size the manifest gives."""
    if manifest.dense_weights is not None:
        raise DelegateInvalidCompatibility(
            f"its weights are one dense blob ({manifest.dense_weights!r}), as ExecuTorch exported them "
            "before 1.5; pterun loads the per-weight storages ExecuTorch 1.5 writes: export the program again"
        )
    for w in manifest.weights:
        data = named_data.get(w.key)
        if data is None:
            raise InvalidExternalData(f"weight {w.fqn!r} is stored under {w.key!r}, which no data file "
                                      "or named data holds (pass the program's .ptd file: data_path=...)")
        if len(data) != w.nbytes:
            raise InvalidExternalData(f"weight {w.fqn!r} ({w.key!r}) is {len(data)} bytes; its manifest "
                                      f"says {w.nbytes}")

