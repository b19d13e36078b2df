"""What an operator's schema says about a call: the kind of value each argument takes, and what is written.

A program passes a kernel value indices; a corrupted one can name a list
where a tensor goes, or a tensor where an int goes, and the kernel would
fail on it with whatever exception Python raises. The schema says what each
argument is, so the executor checks every call against it at load. Kinds are
named as the format names value kinds, in lower case ("tensor", "int_list").

Kernels written in Python (quantized, LLM operators) are bound by the schema
ExecuTorch registers for them, written out in their modules, so their
arguments, their dtype codes and what they write are stated once, there.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from pterun.kernels.registry import Binding, KernelFactory, exact_count

_SCALARS = frozenset({"int", "double", "bool"})
_KINDS = {
    "Tensor": frozenset({"tensor"}),
    "List[Tensor]": frozenset({"tensor_list"}),
    "List[Optional[Tensor]]": frozenset({"optional_tensor_list", "tensor_list"}),
    "int": frozenset({"int"}),
    "float": frozenset({"double", "int"}),
    "bool": frozenset({"bool"}),
    "str": frozenset({"string"}),
    "Scalar": _SCALARS,
    "number": _SCALARS,
    "ScalarType": frozenset({"int"}),
    "MemoryFormat": frozenset({"int"}),
    "Layout": frozenset({"int"}),
    "List[int]": frozenset({"int_list"}),
    "List[float]": frozenset({"double_list"}),
    "List[bool]": frozenset({"bool_list"}),
}


def kinds_of(type_) -> frozenset[str] | None:
    """The value kinds an argument (or result) of this schema type takes; None: not checked."""
    text = str(type_)
    if text.startswith("Optional[") and text.endswith("]"):
        inner = _KINDS.get(text[len("Optional["):-1])
        return None if inner is None else inner | {"null"}
    return _KINDS.get(text)


def argument_kinds(schema) -> tuple[frozenset[str] | None, ...]:
    return tuple(kinds_of(a.real_type) for a in schema.arguments)


def result_kinds(schema) -> frozenset[str] | None:
    """The kinds of the value a call's result is assigned to, for a schema with one result."""
    return kinds_of(schema.returns[0].type) if len(schema.returns) == 1 else None


def python_kernel(fn: Callable, schema_text: str, dtype: Callable | None = None) -> tuple[str, KernelFactory]:
    """(operator name, factory) for a kernel written in Python that takes the schema's arguments in order
    and writes its out arguments itself (resizing them where the shape can vary). ``dtype`` converts the
    ScalarType codes the program passes."""
    schema = torch._C.parse_schema(schema_text)
    name = f"{schema.name}.{schema.overload_name}" if schema.overload_name else schema.name
    arguments = schema.arguments
    n = len(arguments)
    written = tuple(i for i, a in enumerate(arguments) if a.alias_info is not None and a.alias_info.is_write)
    convert = tuple((i, dtype) for i, a in enumerate(arguments)
                    if dtype is not None and str(a.real_type) in ("ScalarType", "Optional[ScalarType]"))
    binding = Binding(fn, tuple(range(n)), convert=convert, mutates=written, accepts=argument_kinds(schema))
    return name, exact_count(binding, n + 1, name)
