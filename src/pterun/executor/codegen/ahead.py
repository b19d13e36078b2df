"""A method's compiled code kept in the load cache, so that another process need not trace it again.

``torch.compile`` traces a function with Dynamo in every process; Inductor's caches then hand back the
compiled kernels, but not the trace. On the 100M decoder's one-token step a second process spent 5.8 of its
6.2 s on a CPU in Dynamo (3.2 s tracing the bytecode, 1.9 of them making fake tensors of the weights) and in
reading back Inductor's code. torch's ahead-of-time form (``torch.compile(...).aot_compile``, read back with
``torch.compiler.load_compiled_function``, in torch 2.11 and later) holds the traced bytecode, its guards and
the compiled graph: read from the load cache, the same step started in 1.5 s.

An entry holds no tensor and no function of the method: they are the closure of the functional form's
generated ``run`` (its constants, the kernels), handed to torch as external data when an entry is written and
read, so an entry is about 2 MB for a 100M decoder whatever its weights. The entry's key is everything the
compiled code may depend on: the generated source, every closure value that is no tensor (numbers bound by
name, lists, dtypes, operators by name, Python functions by their code and what they close over), every
tensor's dtype, sizes, strides and device (Dynamo specializes on them; the values are inputs of the graph,
never folded in, unless Inductor's ``freezing`` is on, which is in the key too), the call's inputs likewise,
the GPU's model or the CPU's vector instructions, and pterun's, Python's and torch's versions
(``LoadCache.key``). A closure value of a kind it cannot describe keeps the
method out of the cache; it still compiles ahead of time. The guards torch saved are checked on every call
(the inputs' sizes, strides and dtypes, the grad mode); a call they refuse runs uncompiled.

Reading an entry unpickles it: the load cache holds code this process will run, trusted as the user's own
files are (docs/cache.md); an entry that fails to read back (damaged, another GPU, another torch) is a miss.
"""

from __future__ import annotations

import hashlib
import io
import marshal
import platform
import sys
import types
from collections.abc import Callable, Sequence

import torch

from pterun.executor.cache import LoadCache


class Ahead:
    """The code compiled ahead of time for one set of input shapes."""

    def __init__(self, compiled, from_cache: bool) -> None:
        self.check: Callable[..., bool] = compiled.guard_check
        self.run: Callable = compiled.fn
        self.from_cache = from_cache  # read back from the load cache, not traced in this process


def available() -> bool:
    """Whether this torch compiles ahead of time with external data (torch 2.11 on) and Inductor's caches are on
    (the ahead-of-time form needs them)."""
    import torch._inductor.config as inductor

    loader = getattr(torch.compiler, "load_compiled_function", None)
    return loader is not None and not inductor.force_disable_caches


def compile_ahead(functional: Callable, args: Sequence, source: str, cache: LoadCache | None) -> Ahead | None:
    """``functional``'s code for ``args``' shapes: read from ``cache``, else compiled (and kept there); None where
    torch cannot compile it ahead of time (torch.compile's own path then compiles it). Dynamo's and the
    backend's errors raise, as torch.compile's would."""
    if not available():
        return None
    closure = _closure(functional)
    key = _key(cache, source, closure, args) if cache is not None else None
    if cache is not None and key is not None:
        payload = cache.get(key)
        if payload is not None:
            try:
                compiled = torch.compiler.load_compiled_function(
                    io.BytesIO(payload), f_globals=functional.__globals__, external_data=_external(closure))
            except Exception:  # noqa: BLE001 - an entry that does not read back (damaged, other GPU) is a miss
                compiled = None
            if compiled is not None:
                return Ahead(compiled, from_cache=True)
    # torch 2.11 offers aot_compile only where asked (its default from 2.13 on)
    with torch._dynamo.config.patch(enable_aot_compile=True):
        aot_compile = getattr(torch.compile(functional, fullgraph=True, dynamic=False), "aot_compile", None)
        if aot_compile is None:
            return None
        try:
            compiled = aot_compile((tuple(args), {}))
        except (torch._dynamo.exc.TorchDynamoException, torch._dynamo.exc.FailOnRecompileLimitHit):
            raise
        except RuntimeError:
            return None  # what torch cannot compile ahead of time (a backend without a serializable form)
        except AssertionError:
            # torch 2.11-2.13 assert where Dynamo made no graph (steps without a tensor operation: moves, lists):
            # torch.compile's own path decides what such a method gets
            return None
    if cache is not None and key is not None:
        try:
            payload = type(compiled).serialize(compiled, _external(closure)).serialized_data
        except Exception:  # noqa: BLE001 - what cannot be kept is compiled again in the next process
            payload = None
        if payload is not None:
            cache.put(key, payload)
    return Ahead(compiled, from_cache=False)


def _closure(functional: Callable) -> dict[str, object]:
    """The values the generated ``run`` reads, by name (make_function binds them as its closure)."""
    code = functional.__code__
    return {name: cell.cell_contents for name, cell in zip(code.co_freevars, functional.__closure__ or ())}


def _external(closure: dict[str, object]) -> dict[str, object]:
    """What an entry refers to rather than holds: the tensors and functions. Numbers stay in it (the key holds
    their values): handed over as external data, an entry would take any equal small int it holds, wherever,
    for a reference to the closure's."""
    return {name: value for name, value in closure.items() if not _scalar(value)}


def _scalar(value) -> bool:
    return value is None or isinstance(value, (bool, int, float, str, torch.dtype, torch.device, torch.memory_format,
                                               torch.layout))


def _key(cache: LoadCache, source: str, closure: dict[str, object], args: Sequence) -> str | None:
    parts = [source, _compile_settings(args)]
    for name in sorted(closure):
        described = _describe(closure[name])
        if described is None:
            return None
        parts.append(f"{name}={described}")
    for arg in args:
        described = _describe(arg)
        if described is None:
            return None
        parts.append(described)
    return cache.key("ahead-compiled", *parts)


def _compile_settings(args: Sequence) -> str:
    """What the compiled code depends on of the machine: the CPU's vector instructions (Inductor's C++ is compiled
    for them: a cache shared with a machine without AVX-512 would otherwise hand it code that cannot run there)
    and the GPU its inputs are on (Triton's kernels are built for it); and Inductor's freezing, which folds the
    values of tensors into the code."""
    import torch._inductor.config as inductor

    machine = f"{platform.machine()} {torch.backends.cpu.get_cpu_capability()}"
    gpu = next((a.device for a in args if isinstance(a, torch.Tensor) and a.device.type == "cuda"), None)
    if gpu is None and torch.cuda.is_available():
        gpu = torch.device("cuda", torch.cuda.current_device())
    if gpu is not None:
        machine += f" {torch.cuda.get_device_name(gpu)} {torch.cuda.get_device_capability(gpu)}"
    return f"freezing={inductor.freezing} machine={machine}"


def _found_again(function: types.FunctionType) -> bool:
    """Whether torch's saved guards can name ``function`` in another process: a nested function (rebuilt from its
    code), or one its module holds under its qualified name. torch saves any other as missing, and the guards
    that read it then fail on every load: the entry would be written and never read."""
    if "<locals>" in function.__qualname__:
        return True
    found = sys.modules.get(function.__module__)
    for name in function.__qualname__.split("."):
        found = getattr(found, name, None)
    return found is function


def _describe(value, depth: int = 0) -> str | None:
    """What compiled code may depend on of one value, as text; None for a kind this does not know (or nested past
    a few levels: a function that closes over itself)."""
    if depth > 4:
        return None
    if isinstance(value, torch.Tensor):
        return (f"tensor({value.dtype}, {tuple(value.shape)}, {value.stride()}, {value.storage_offset()}, "
                f"{value.device}, {value.requires_grad})")
    if isinstance(value, float):
        return f"float({value.hex()})"
    if _scalar(value):
        return f"{type(value).__name__}({value!r})"
    if isinstance(value, (list, tuple)):
        items = [_describe(v, depth + 1) for v in value]
        return None if any(i is None for i in items) else f"{type(value).__name__}[{', '.join(items)}]"  # type: ignore[arg-type]
    if isinstance(value, torch._ops.OpOverload):
        return f"op({value.name()})"
    if isinstance(value, types.FunctionType):
        if not _found_again(value):
            return None
        # Dynamo traces into a Python function: its code and what it closes over are part of the trace.
        inner = [_describe(cell.cell_contents, depth + 1) for cell in value.__closure__ or ()]
        inner.append(_describe(value.__defaults__, depth + 1))
        if any(i is None for i in inner):
            return None
        digest = hashlib.sha256(marshal.dumps(value.__code__)).hexdigest()
        return f"function({value.__module__}.{value.__qualname__}, {digest}, {', '.join(inner)})"  # type: ignore[arg-type]
    if isinstance(value, types.BuiltinFunctionType):
        return f"builtin({value.__module__}.{value.__qualname__})"
    return None
