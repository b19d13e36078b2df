"""Kernels written in Python declare, in their Binding, every argument ExecuTorch's schema says they write.

The executor learns what a call writes from the Binding alone (to refuse
writes to constants, to turn copies into views), so a kernel that wrote an
argument it did not declare would let both go wrong silently. The schemas
compared against are ExecuTorch's own, as its libraries register them with
torch, not the text our modules bind by.
"""

from __future__ import annotations

import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401 - llama:: schemas
import executorch.kernels.quantized  # noqa: F401 - quantized_decomposed:: out variants' schemas
import pytest
import torch
from executorch.extension.llm.custom_ops import op_tile_crop_aot  # noqa: F401 - preprocess::tile_crop

from pterun.errors import InvalidProgram
from pterun.kernels import KernelRegistry, default_registry, llm, quantized


def _executorch_schema(name: str) -> torch.FunctionSchema:
    qualified, _, overload = name.partition(".")
    namespace, op = qualified.split("::")
    return getattr(getattr(getattr(torch.ops, namespace), op), overload)._schema


def _schema_writes(schema: torch.FunctionSchema) -> set[int]:
    return {i for i, a in enumerate(schema.arguments) if a.alias_info is not None and a.alias_info.is_write}


@pytest.mark.parametrize("module", [quantized, llm], ids=["quantized", "llm"])
def test_every_kernel_declares_the_arguments_its_schema_writes(module):
    registry = KernelRegistry()
    module.register(registry)
    names = sorted(registry.names)
    assert names
    for name in names:
        schema = _executorch_schema(name)
        binding = registry.lookup(name)(len(schema.arguments) + 1)
        declared = set(binding.writes) | set(binding.mutates)
        assert declared == _schema_writes(schema), f"{name}: declares {sorted(declared)}, schema {schema}"


def test_cache_updates_declare_the_cache_updated_in_place():
    # Updated in place, not an out: the executor may empty a dynamic out before the call.
    registry = KernelRegistry()
    llm.register(registry)
    for name in ("llama::update_cache.out", "llama::update_cache_with_indices.out"):
        binding = registry.lookup(name)(len(_executorch_schema(name).arguments) + 1)
        assert 1 in binding.mutates and 1 not in binding.writes, name  # (value, cache, ...)


@pytest.mark.parametrize("module", [quantized, llm], ids=["quantized", "llm"])
def test_every_kernel_is_bound_by_its_arity(module):
    """Each kernel takes its schema's arguments in order, and a call passing more or fewer is a corrupt
    program."""
    registry = default_registry()
    for _, text in module.KERNELS:
        schema = torch._C.parse_schema(text)
        nargs = len(schema.arguments)
        factory = registry.lookup(f"{schema.name}.{schema.overload_name}")
        assert factory(nargs + 1).positional == tuple(range(nargs))
        for wrong in (nargs, nargs + 2):
            with pytest.raises(InvalidProgram):
                factory(wrong)
