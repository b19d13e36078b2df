"""The delegate's generated code is kept in the executor's load cache (docs/cache.md) like a method's."""

from __future__ import annotations

import torch

import pterun
from pterun.backends.xnnpack import compiler
from pterun.executor import cache as cache_module
from tests.backends.xnnpack.test_xnnpack_packed import _export, _inputs


def test_a_second_load_compiles_no_delegate_code(tmp_path, monkeypatch):
    exported = _export()
    runtime = pterun.Runtime.get()
    first = runtime.load_program(exported.pte, cache_dir=tmp_path).load_method("forward")
    assert first.delegate_handles and all(d.source for d in first.delegate_handles)
    expected = first.execute(_inputs(0))

    def refused(*args, **kwargs):
        raise AssertionError("compile ran")

    for module in (compiler, cache_module):  # a module-level name shadows the builtin
        monkeypatch.setattr(module, "compile", refused, raising=False)
    second = runtime.load_program(exported.pte, cache_dir=tmp_path).load_method("forward")
    actual = second.execute(_inputs(0))
    assert len(actual) == len(expected) and all(torch.equal(a, e) for a, e in zip(actual, expected))
