"""``aten::<view>_copy`` out-variants as a view plus one copy into ``out``.

PyTorch implements ``permute_copy.out`` and its kin by materializing the
functional result in a fresh tensor and then copying it into ``out``: an
allocation and a second pass on every call. Copying straight from the view
writes ``out`` once and allocates nothing.
"""

from __future__ import annotations

import functools

from pterun.kernels.aten import functional_of, overload_of, view_of
from pterun.kernels.registry import Binding, KernelFactory, exact_count
from pterun.kernels.schema import argument_kinds


def _copier(view):
    def copy(*args, out, **kwargs):
        source = view(*args, **kwargs)
        if out.shape != source.shape:
            out.resize_(source.shape)
        return out.copy_(source)

    return copy


@functools.cache
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
    binding = Binding(copy, positional, keywords, None, writes=(dict(keywords)["out"],), accepts=accepts,
                      strided=True, view=view, functional=functional_of(name))
    return exact_count(binding, n + 1, name)
