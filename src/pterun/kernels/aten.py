"""ATen operators, bound to PyTorch's own implementation by their schema.

Most operators in a program are ATen out-variants whose schema is the one
PyTorch registers under the same name, so one binder serves them all: the
schema says which arguments are keyword-only, which are written, and which
ints are really dtypes or memory formats. The call goes to the overload's
C++ entry point (``OpOverload._op``), skipping Python-level dispatch.
"""

from __future__ import annotations

import dataclasses
import functools

import torch

from pterun.core.dtype import to_torch
from pterun.errors import InvalidProgram
from pterun.kernels.registry import Binding, Functional, KernelFactory, exact_count
from pterun.kernels.schema import argument_kinds, result_kinds

_MEMORY_FORMATS = (torch.contiguous_format, torch.preserve_format, torch.channels_last, torch.channels_last_3d)
_LAYOUTS = {0: torch.strided, 1: torch.sparse_coo}


def _code(value, what: str, valid) -> int | None:
    # These arguments are ints in the program; anything else is a corrupt program, not a kernel error.
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value not in valid:
        raise InvalidProgram(f"{value!r} is not a {what}")
    return value


def _dtype(code):
    code = _code(code, "scalar type", range(64))
    return None if code is None else to_torch(code)


def _memory_format(code):
    code = _code(code, "memory format", range(len(_MEMORY_FORMATS)))
    return None if code is None else _MEMORY_FORMATS[code]


def _layout(code):
    code = _code(code, "layout", _LAYOUTS)
    return None if code is None else _LAYOUTS[code]


_CONVERTERS = {
    "ScalarType": _dtype, "Optional[ScalarType]": _dtype,
    "MemoryFormat": _memory_format, "Optional[MemoryFormat]": _memory_format,
    "Layout": _layout, "Optional[Layout]": _layout,
}


def split_name(name: str) -> tuple[str, str, str]:
    """"aten::add.out" -> ("aten", "add", "out"); a missing overload is "default"."""
    namespace, _, rest = name.partition("::")
    op, _, overload = rest.partition(".")
    return namespace, op, overload or "default"


@functools.lru_cache(maxsize=1)
def _registered() -> dict[str, dict[str, tuple[str, str]]]:
    """Every operator torch registers: qualified name ("aten::add") -> {overload ("out", "default"): the
    (name, overload name) torch knows it by}. Built from the operator registry's schemas, once."""
    table: dict[str, dict[str, tuple[str, str]]] = {}
    for schema in torch._C._jit_get_all_schemas():
        table.setdefault(schema.name, {})[schema.overload_name or "default"] = (schema.name, schema.overload_name)
    return table


def _resolve(qualified: str, overload: str):
    # Only names the registry holds reach torch.ops, so a name from a program never selects a Python
    # attribute (a name like "aten::add.__class__" is simply not an operator).
    known = _registered().get(qualified, {}).get(overload)
    if known is None:
        return None
    namespace, _, op = known[0].partition("::")
    try:
        found = getattr(getattr(getattr(torch.ops, namespace), op), overload)
    except (AttributeError, RuntimeError):
        return None
    if not isinstance(found, torch._ops.OpOverload) or found._schema.name != known[0] or \
            found._schema.overload_name != known[1]:
        return None
    return found


def overload_of(name: str):
    """The ``OpOverload`` a program's operator name ("aten::add.out") names, or None if torch has none."""
    namespace, op, overload = split_name(name)
    return _resolve(f"{namespace}::{op}", overload)


def overloads_of(qualified: str) -> list:
    """Every ``OpOverload`` of an operator ("aten::add"), in the registry's order."""
    found = (_resolve(qualified, overload) for overload in _registered().get(qualified, {}))
    return [o for o in found if o is not None]


# Operators whose results depend on tensor values read on the host (a value, or a data-dependent shape).
_HOST_SYNCING = frozenset({
    "aten::_local_scalar_dense", "aten::_local_scalar_dense.default", "aten::nonzero.out", "aten::masked_select.out",
    "aten::unique_consecutive.out", "aten::_unique2.out", "aten::unique_dim.out",
})

# Factory functions (arange, full, ...) take the result's dtype and device where their out-variant
# takes the out tensor.
_TENSOR_OPTIONS = ("dtype", "layout", "device", "pin_memory")
_VIEW_COPY_OUTS = ("out", "Tensor_out", "int_out", "dims_out", "dim_out")


def view_of(name: str):
    """The view an ``aten::<view>_copy`` out-variant copies (permute_copy.out -> permute.default), or None."""
    namespace, op, overload = split_name(name)
    if namespace != "aten" or not op.endswith("_copy") or overload not in _VIEW_COPY_OUTS:
        return None
    return overload_of(f"aten::{op[: -len('_copy')]}.{'default' if overload == 'out' else overload[: -len('_out')]}")


def _slice_copy(x, dim=0, start=None, end=None, step=1):
    return torch.ops.aten.slice.Tensor(x, dim, start, end, step).clone(memory_format=torch.contiguous_format)


def _select_copy(x, dim, index):
    return torch.ops.aten.select.int(x, dim, index).clone(memory_format=torch.contiguous_format)


# TorchInductor lowers no slice_copy nor select_copy (torch 2.11-2.13): it calls ATen's, a kernel of its own that
# nothing fuses into (an 8da4w decoder's step had 64 of them). The view, then a contiguous copy, which it fuses.
_FUSED_COPIES = {"aten::slice_copy.Tensor_out": _slice_copy, "aten::select_copy.int_out": _select_copy}


@functools.cache
def functional_of(name: str) -> Functional | None:
    """The functional form of an ATen operator: for an out-variant, the overload that returns what it
    writes (``aten::add.out`` -> ``aten::add.Tensor``); for any other, the overload itself."""
    form = _functional_of(name)
    if form is not None and name in _FUSED_COPIES:
        return dataclasses.replace(form, fn=_FUSED_COPIES[name])
    return form


def _functional_of(name: str) -> Functional | None:
    out = overload_of(name)
    if out is None:
        return None
    schema = out._schema
    outputs = tuple(i for i, a in enumerate(schema.arguments) if a.is_out)
    if not outputs:
        return Functional(out)
    inputs = [(a.name, str(a.type)) for a in schema.arguments if not a.is_out]
    names = {a for a, _ in inputs}
    for candidate in overloads_of(schema.name):
        s = candidate._schema
        if any(a.is_out or (a.alias_info is not None and a.alias_info.is_write) for a in s.arguments):
            continue
        if len(s.returns) != len(outputs):
            continue
        arguments = [(a.name, str(a.type)) for a in s.arguments]
        if arguments == inputs:
            return Functional(candidate, outputs)
        if [a for a in arguments if a[0] not in _TENSOR_OPTIONS] == inputs and all(
            a.name in names or a.name in _TENSOR_OPTIONS for a in s.arguments
        ):
            return Functional(candidate, outputs, ("dtype", "device"))
    return None


def schema_kernel(overload, name: str) -> KernelFactory:
    """Binds ``overload`` (a torch ``OpOverload``) by its schema."""
    schema = overload._schema
    arguments = schema.arguments
    n = len(arguments)
    positional = tuple(i for i, a in enumerate(arguments) if not a.kwarg_only)
    keywords = tuple((a.name, i) for i, a in enumerate(arguments) if a.kwarg_only)
    convert = tuple(
        (i, _CONVERTERS[str(a.real_type)]) for i, a in enumerate(arguments) if str(a.real_type) in _CONVERTERS
    )
    writes = tuple(i for i, a in enumerate(arguments) if a.is_out)
    mutates = tuple(i for i, a in enumerate(arguments)
                    if not a.is_out and a.alias_info is not None and a.alias_info.is_write)
    # Results that alias a written argument are that argument: nothing to assign.
    returns_fresh = any(r.alias_info is None or not r.alias_info.is_write for r in schema.returns)
    # A result that is a view (``Tensor(a)``, or a list of them) shares memory with the arguments
    # annotated with an alias set; the schema's contained types are not inspected, so any such
    # argument counts.
    views = any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns)
    aliases = tuple(i for i, a in enumerate(arguments) if a.alias_info is not None) if views else ()
    binding = Binding(overload._op, positional, keywords, n if returns_fresh else None, convert, writes, mutates,
                      aliases, argument_kinds(schema), result_kinds(schema) if returns_fresh else None,
                      syncs=name in _HOST_SYNCING, strided=True, view=view_of(name), functional=functional_of(name))
    return exact_count(binding, n + 1, name)


@functools.cache
def aten_kernel(name: str) -> KernelFactory:
    """The factory of ATen operator ``name``, which torch has (the kernels that wrap ATen's ask for theirs)."""
    factory = aten_provider(name)
    assert factory is not None, name
    return factory


def aten_provider(name: str) -> KernelFactory | None:
    if not name.startswith("aten::"):
        return None
    overload = overload_of(name)
    if overload is None:
        return None
    return schema_kernel(overload, name)


@functools.lru_cache(maxsize=1)
def aten_names() -> frozenset[str]:
    """Every ATen overload that writes its result into caller memory, as the program would name it."""
    names = set()
    for schema in torch._C._jit_get_all_schemas():
        if schema.name.startswith("aten::") and any(a.is_out for a in schema.arguments):
            names.add(f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name)
    return frozenset(names)
