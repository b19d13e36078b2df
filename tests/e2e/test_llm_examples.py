"""ExecuTorch's example Llama, exported as its LLM export does, against ExecuTorch's runtime.

A tiny model (two layers, grouped-query attention, a 32-token context) gets
the source transforms ``export_llama`` applies for ``use_kv_cache`` with
``use_sdpa_with_kv_cache``: ExecuTorch's custom SDPA and custom KV cache (the
``llama::custom_sdpa`` and ``llama::update_cache`` operators), optionally the
quantized KV cache (``llama::custom_quantized_sdpa`` with per-token int8 query
quantization) or a 4-bit quantized embedding. It is exported with a dynamic
token count, strict, and with the LLM builder's memory planning and symbolic
shape passes, then driven like a generator: a prompt, then one token at a
time, each call compared with ExecuTorch's runtime holding its own cache.
"""

from __future__ import annotations

import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401 - llama:: ops, eager and in the runtime
import executorch.kernels.quantized  # noqa: F401 - quantized_decomposed:: out variants and kernels
import pytest
import torch

import pterun
from tests.support.compare import assert_matches
from tests.support.exporting import ExportSpec, export_program
from tests.support.oracle import reference_module
from tests.support.premises import assert_calls, method_plan

_CONTEXT = 32
_VOCAB = 128

_VARIANTS = {
    "custom-sdpa": {"llama::update_cache.out", "llama::custom_sdpa.out"},
    "quantized-kv-cache": {
        "llama::update_cache.out", "llama::custom_quantized_sdpa.out",
        "quantized_decomposed::choose_qparams_per_token_asymmetric.out",
        "quantized_decomposed::quantize_per_token.out",
    },
    "embedding-4bit": {
        "llama::update_cache.out", "llama::custom_sdpa.out", "quantized_decomposed::embedding_4bit.dtype_out",
    },
}


def _llama_spec(variant: str) -> ExportSpec:
    from executorch.examples.models.llama.llama_transformer import construct_transformer
    from executorch.examples.models.llama.model_args import ModelArgs
    from executorch.examples.models.llama.source_transformation.custom_kv_cache import (
        replace_kv_cache_with_custom_kv_cache,
        replace_kv_cache_with_quantized_kv_cache,
    )
    from executorch.examples.models.llama.source_transformation.quantize import EmbeddingQuantHandler
    from executorch.examples.models.llama.source_transformation.sdpa import (
        replace_sdpa_with_custom_op,
        replace_sdpa_with_quantized_sdpa,
    )
    from executorch.exir.passes import MemoryPlanningPass
    from executorch.exir.passes.sym_shape_eval_pass import ConstraintBasedSymShapeEvalPass

    torch.manual_seed(0)
    args = ModelArgs(
        dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=_VOCAB, hidden_dim=128, max_batch_size=1,
        max_seq_len=_CONTEXT, max_context_len=_CONTEXT, use_kv_cache=True, use_sdpa_with_kv_cache_op=True,
        enable_dynamic_shape=True,
    )
    model = construct_transformer(args).eval()
    if variant == "embedding-4bit":
        model = EmbeddingQuantHandler(model, bitwidth=4, group_size=32, packed=True,
                                      quantize_with_hqq=False).quantized_model()
    # export_llama's order: custom SDPA, custom KV cache, then the quantized cache and its SDPA.
    replace_sdpa_with_custom_op(model)
    replace_kv_cache_with_custom_kv_cache(model)
    if variant == "quantized-kv-cache":
        replace_kv_cache_with_quantized_kv_cache(model)
        replace_sdpa_with_quantized_sdpa(model)
    example = (torch.tensor([[2, 3, 4]]), {"input_pos": torch.tensor([0])})
    dynamic = ({1: torch.export.Dim("token_dim", max=_CONTEXT - 1)}, {"input_pos": {0: 1}})
    return ExportSpec(
        model, example, dynamic_shapes=dynamic, strict=True,
        edge_config=dict(_check_ir_validity=False, _skip_dim_order=True),
        config=dict(memory_planning_pass=MemoryPlanningPass(alloc_graph_input=False),
                    sym_shape_eval_pass=ConstraintBasedSymShapeEvalPass()),
    )


@pytest.mark.parametrize("variant", list(_VARIANTS))
def test_llama_generation_matches_executorch_call_by_call(variant):
    exported = export_program(f"llama-tiny-{variant}-v1", lambda: _llama_spec(variant))
    assert_calls(exported.pte, _VARIANTS[variant])
    assert not method_plan(exported).delegates

    ours = pterun.Runtime.get().load_program(exported.pte).load_method("forward")
    theirs = reference_module(exported.pte)
    g = torch.Generator().manual_seed(1)
    position = 0
    for length in (6, 1, 1, 1, 4, 1):  # a prompt, decoding, a second prompt chunk, decoding
        tokens = torch.randint(0, _VOCAB, (1, length), generator=g)
        input_pos = torch.tensor([position])
        actual = ours.execute([tokens, input_pos])
        expected = list(theirs.run_method("forward", [tokens.clone(), input_pos.clone()]))
        assert_matches(actual, expected, what=f"logits at position {position}")
        position += length
    # The caches filled the same way: a repeated query at a fresh position still agrees.
    tokens = torch.tensor([[7]])
    actual = ours.execute([tokens, torch.tensor([position])])
    expected = list(theirs.run_method("forward", [tokens, torch.tensor([position])]))
    assert_matches(actual, expected)
