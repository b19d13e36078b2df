"""Buffers updated in place (executor/load/in_place.py): a KV cache's out-of-place update that the method
copies back into the cache becomes an update in the cache, with the same results call after call, against
ExecuTorch's runtime, the method's profiled form (every instruction as the file has it) and fuse=False."""

from __future__ import annotations

import torch

import pterun
from pterun.executor.load.steps import KernelStep
from tests.support.exporting import ExportSpec, export_program
from tests.support.oracle import reference_module


class _Cache(torch.nn.Module):
    """Writes one position of a cache per call (index_put or index_copy, as transformers' static cache does)
    and reads the whole cache; ``twice`` writes it at two positions in one call."""

    def __init__(self, how: str) -> None:
        super().__init__()
        self.how = how
        self.register_buffer("cache", torch.zeros(1, 2, 16, 4))

    def forward(self, x, position):
        if self.how == "index_copy":
            self.cache.index_copy_(2, position, x)
        else:
            self.cache[:, :, position] = x
            if self.how == "twice":
                self.cache[:, :, position + 1] = x * 2
        return (self.cache * 3).sum(2)


def _export(how: str):
    return export_program(f"in-place-cache-{how}", lambda: ExportSpec(
        _Cache(how), (torch.randn(1, 2, 1, 4), torch.tensor([0])), strict=True))


def _updates(method) -> list[str]:
    return [s.name for s in method._loaded.steps if isinstance(s, KernelStep) and "index_" in s.name]


def _calls():
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(1, 2, 1, 4, generator=g), torch.tensor([p])) for p in (0, 5, 1, 5, 14)]


def _check(how: str, rewritten: list[str]) -> None:
    exported = _export(how)
    method = pterun.Runtime.get().load_program(exported.pte).load_method("forward")
    assert _updates(method) == rewritten, _updates(method)
    profiled = pterun.Runtime.get().load_program(exported.pte, enable_etdump=True).load_method("forward")
    assert not any(name.endswith("_") for name in _updates(profiled)), "premise: the file's own updates"
    plain = pterun.Runtime.get().load_program(exported.pte, fuse=False).load_method("forward")
    reference = reference_module(exported.pte)
    for k, (x, position) in enumerate(_calls()):
        (expected,) = reference.run_method("forward", [x.clone(), position.clone()])
        for way in (method, profiled, plain):
            (out,) = way.execute([x, position])
            assert torch.equal(out, expected), f"call {k}"


def test_a_cache_update_copied_back_is_made_in_the_cache():
    _check("index_put", ["aten::index_put_"])


def test_an_index_copy_update_is_made_in_the_cache_too():
    """The exporter writes index_copy_ as an index_put (transformers' static cache updates either way)."""
    _check("index_copy", ["aten::index_put_"])


def test_an_update_of_an_updated_cache_is_left_as_the_file_has_it():
    """Two updates in one call: the copy back reads the second, whose input is the first's result, not the
    cache; the first is read after the second is made, so neither is rewritten."""
    _check("twice", ["aten::index_put.out", "aten::index_put.out"])
