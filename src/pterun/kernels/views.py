"""``aten::<view>_copy`` out-variants as a view plus one copy into ``out``.

PyTorch implements ``permute_copy.out`` and its kin by materializing the
functional result in a fresh tensor and then copying it into ``out``: an
allocation and a second pass on every call. Copying straight from the view
writes ``out`` once and allocates nothing.
"""

from __future__ import annotations

import functools

from pterun.kernels.aten import overload_of, split_name
from pterun.kernels.registry import Binding, KernelFactory
from pterun.kernels.schema import argument_kinds

_OUT_OVERLOADS = ("out", "Tensor_out", "int_out", "dims_out", "dim_out")


def _copier(view):
    def copy(*args, out, **kwargs):
        source = view(*args, **kwargs)
        if out.shape != source.shape:
            out.resize_(source.shape)
        return out.copy_(source)

    return copy


def view_of(name: str):
    """The view an ``aten::<view>_copy`` out-variant copies (permute_copy.out -> permute.default), or None."""
    namespace, op, overload = split_name(name)
    if namespace != "aten" or not op.endswith("_copy") or overload not in _OUT_OVERLOADS:
        return None
    return overload_of(f"aten::{op[: -len('_copy')]}.{'default' if overload == 'out' else overload[: -len('_out')]}")


@functools.lru_cache(maxsize=None)
def view_copy_provider(name: str) -> KernelFactory | None:
    view = view_of(name)
    out_variant = overload_of(name)
    if view is None or out_variant is None:
        return None
    arguments = out_variant._schema.arguments
    outs = [a for a in arguments if a.is_out]
    if len(outs) != 1 or outs[0].name != "out" or str(outs[0].type) != "Tensor":
        return None  # lists of outputs (split) keep torch's kernel
    if [a.name for a in view._schema.arguments] != [a.name for a in arguments if not a.is_out]:
        return None
    n = len(arguments)
    copy = _copier(view)
    accepts = argument_kinds(out_variant._schema)
    positional = tuple(i for i, a in enumerate(arguments) if not a.is_out and not a.kwarg_only)
    keywords = tuple((a.name, i) for i, a in enumerate(arguments) if a.kwarg_only)

    def factory(count: int) -> Binding:
        from pterun.errors import InvalidProgram

        if count != n + 1:
            raise InvalidProgram(f"{name} takes {n} arguments and a result; the call passes {count} values")
        out_position = dict(keywords)["out"]
        return Binding(copy, positional, keywords, None, writes=(out_position,), accepts=accepts)

    return factory
