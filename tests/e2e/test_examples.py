"""ExecuTorch's own example models (those that build offline) against ExecuTorch's runtime.

The toy models, the LSTM, the MLPerf Tiny models and the Llama example
transformer, plus that transformer with its KV cache decoding token by token,
compared call by call with ExecuTorch's runtime keeping the same state.
"""

from __future__ import annotations

import pytest
import torch

from pterun.format import Dynamism, ProgramFile, TensorSpec
from tests.support.compare import assert_matches
from tests.support.differential import check_model, export_model, flat, load, lowerings
from tests.support.models import VOCAB, tokens
from tests.support.oracle import reference_module

EXAMPLES = [
    "et_toy_mul",
    "et_toy_add",
    "et_toy_add_mul",
    "et_toy_softmax",
    "et_toy_conv1d",
    "et_toy_linear",
    "et_toy_sdpa",
    "et_toy_sdpa_bf16",
    "et_lstm",
    "et_deep_autoencoder",
    "et_ds_cnn",
    "et_mobilenet_v1_025",
    "et_resnet8",
    "et_llama",
]


@lowerings
@pytest.mark.parametrize("name", EXAMPLES)
def test_example_model(name, lower):
    check_model(name, lower)


@lowerings
def test_llama_example_decodes_with_kv_cache(lower):
    exported = export_model("et_llama_kv", lower)
    plan = ProgramFile(exported.pte).plan("forward")
    caches = [
        v
        for v in plan.values
        if isinstance(v, TensorSpec) and v.memory_id is not None and len(v.sizes) == 4 and v.sizes[2] == 32
    ]
    assert len(caches) >= 4, "no KV cache buffers (2 layers x k, v) are planned"
    assert ("aten::index_put", "out") in plan.operators, "the cache is not written by index_put"
    method = load(exported).load_method("forward")
    reference = reference_module(exported.pte)
    token = tokens(0, VOCAB, 1, 1)
    for pos in range(6):
        args = flat((token, torch.tensor([pos], dtype=torch.long)))
        expected = list(reference.run_method("forward", [a.clone() for a in args]))
        actual = method.execute(args)
        assert_matches(actual, expected, what=f"step {pos}")
        token = expected[0].argmax(-1).reshape(1, 1)  # greedy: both runtimes get the same next token


@lowerings
def test_llama_example_prefills_then_decodes(lower):
    """A prompt of several tokens in one call (dynamic length), then one token per call, sharing the cache."""
    exported = export_model("et_llama_kv_dynamic", lower)
    plan = ProgramFile(exported.pte).plan("forward")
    assert plan.values[plan.inputs[0]].dynamism == Dynamism.DYNAMIC_BOUND
    method = load(exported).load_method("forward")
    reference = reference_module(exported.pte)
    prompt = tokens(1, VOCAB, 1, 7)
    pos, step_tokens = 0, prompt
    for step in range(5):
        args = [step_tokens, torch.tensor([pos], dtype=torch.long)]
        expected = list(reference.run_method("forward", [a.clone() for a in args]))
        assert_matches(method.execute(args), expected, what=f"step {step}")
        pos += step_tokens.shape[1]
        step_tokens = expected[0].argmax(-1).reshape(1, 1)
