"""A 4-bit Llama exported the way ExecuTorch's Vulkan/WebGPU LLM recipe exports it, generating on WebGPU.

The recipe (``export_llama -d fp32 --vulkan -qmode 8da4w -kv --use_sdpa_with_kv_cache``, here with the
tiny random-weight config of tests/support/llm_programs.py and groups of 32) lowers the whole decoder into
one VulkanBackend delegate: 4-bit grouped weights with activations quantized per token as they arrive
(``linear_dq8ca_q4gsw`` after ``choose_qparams_affine``), rotary embeddings, RMSNorm, and attention over a
KV cache the delegate keeps (``sdpa_with_kv_cache``). The reference is the same model run eagerly in
PyTorch after the recipe's source transforms, before export: the arithmetic the program stands for. Greedy
generation through pterun.llm.TextLLMRunner matches it token for token, and each call's logits within
LOGITS_RTOL of their largest magnitude (float sums in another order; a product landing on the other side
of a rounding tie when an activation is quantized).

ExecuTorch's CPU recipe for the same quantization (XNNPACK) quantizes activations its own way: its logits
are 1.5e-2 away from PyTorch's, its greedy tokens part from them after a few tens of tokens.
"""

from __future__ import annotations

import collections

import pytest
import torch

import pterun
from pterun.format import ProgramFile
from pterun.llm import GenerationConfig, TextLLMRunner
from pterun.llm.tokenizer import PieceStream
from tests.backends.webgpu.adapter import needs_adapter
from tests.backends.webgpu.programs import delegates, graphs
from tests.support.llm_programs import llama_greedy_reference, llama_program

pytestmark = [needs_adapter, pytest.mark.slow]  # slow: the export and the eager run, tens of seconds

VARIANT = "vulkan-8da4w"
PROMPT = "The quick brown fox"
NEW_TOKENS = 24
LOGITS_RTOL = 5e-3


@pytest.fixture(scope="module")
def program():
    return llama_program(VARIANT)


@pytest.fixture(scope="module")
def runner(program):
    return TextLLMRunner(program.pte, program.tokenizer)


@pytest.fixture(scope="module")
def reference(runner):
    prompt = runner.tokenizer.encode(PROMPT, 0, 0)
    return prompt, llama_greedy_reference(VARIANT, prompt, NEW_TOKENS)


def test_the_recipe_lowers_the_whole_decoder(program):
    (graph,) = graphs(program.pte)
    ops = collections.Counter(op.name for op in graph.chain)
    n_layers = program.metadata["get_n_layers"]
    assert ops["sdpa_with_kv_cache.default"] == n_layers, ops
    assert ops["et_vk.linear_dq8ca_q4gsw.default"] == 7 * n_layers + 1, ops  # q, k, v, o, 3 MLP; the output
    assert ops["torchao.choose_qparams_affine.default"] == ops["et_vk.linear_dq8ca_q4gsw.default"]
    assert {"et_vk.rms_norm.default", "et_vk.apply_rotary_emb.default", "aten.embedding.default"} <= set(ops)
    assert not ProgramFile(program.pte).plan("forward").operators, "the program calls CPU kernels too"
    method = pterun.Runtime.get().load_program(program.pte).load_method("forward")
    assert len(delegates(method)) == 1


def test_greedy_generation_matches_pytorch_token_for_token(runner, reference):
    prompt, eager = reference
    assert len(set(eager["tokens"])) > 3, "premise: the reference generates more than a repeated token"
    expected: list[str] = []
    stream = PieceStream(runner.tokenizer, expected.append)
    tokens = eager["tokens"]
    stream.push(tokens[0], tokens[0])
    for prev, cur in zip(tokens, tokens[1:]):
        stream.push(prev, cur)
    stream.flush()
    pieces: list[str] = []
    runner.reset()
    runner.generate(PROMPT, GenerationConfig(temperature=0.0, echo=False, max_new_tokens=NEW_TOKENS),
                    pieces.append)
    assert pieces == expected


def test_each_calls_logits_match_pytorch(program, reference):
    prompt, eager = reference
    method = pterun.Runtime.get().load_program(program.pte).load_method("forward")
    history, step = list(prompt), torch.tensor([prompt])
    for k, (token, want) in enumerate(zip(eager["tokens"], eager["logits"], strict=True)):
        logits = method.execute([step, torch.tensor([len(history) - step.shape[1]])])[0]
        got = logits.reshape(-1, logits.shape[-1])[-1]
        scale = want.abs().max().item()
        diff = (got - want).abs().max().item()
        assert diff <= LOGITS_RTOL * scale, f"call {k}: logits off by {diff:.3g} (largest {scale:.3g})"
        history.append(token)
        step = torch.tensor([[token]])
