"""The exporter's constant methods, and ExecuTorch's defaults for those a program lacks."""

from __future__ import annotations

import torch

from pterun.llm.metadata import read_metadata
from pterun.runtime import Runtime
from tests.support.exporting import ExportSpec, export_program


class _Scale(torch.nn.Module):
    def forward(self, x):
        return x * 2.0


def _metadata(key: str, methods: dict):
    exported = export_program(key, lambda: ExportSpec(_Scale(), (torch.ones(2),), constant_methods=methods))
    return read_metadata(Runtime.get().load_program(exported.pte))


def test_defaults_for_absent_methods():
    meta = _metadata("llm-metadata-minimal-v1", {"get_max_seq_len": 64})
    assert (meta.max_seq_len, meta.max_context_len) == (64, 64)  # the context defaults to max_seq_len
    assert meta.use_kv_cache and not meta.enable_dynamic_shape and not meta.use_sdpa_with_kv_cache
    assert meta.vocab_size is None and meta.bos_id is None and meta.eos_ids is None


def test_values_as_written():
    meta = _metadata("llm-metadata-full-v1", {
        "get_max_seq_len": 64, "get_max_context_len": 256, "use_kv_cache": False,
        "enable_dynamic_shape": True, "use_sdpa_with_kv_cache": True, "get_vocab_size": 1000,
        "get_bos_id": 11, "get_eos_ids": [5, 7]})
    assert (meta.max_seq_len, meta.max_context_len, meta.vocab_size, meta.bos_id) == (64, 256, 1000, 11)
    assert not meta.use_kv_cache and meta.enable_dynamic_shape and meta.use_sdpa_with_kv_cache
    assert meta.eos_ids == (5, 7)


def test_eos_ids_as_one_tensor():
    methods = {"get_max_seq_len": 64, "get_eos_ids": torch.tensor([5, 7, 9])}
    meta = _metadata("llm-metadata-eos-tensor-v1", methods)
    assert meta.eos_ids == (5, 7, 9)
