"""Programs whose token input is fixed: one token per call (also where the metadata says otherwise), or
a fixed number of tokens, which cannot hold an arbitrary prompt."""

from __future__ import annotations

import pytest
import torch

from pterun.errors import NotSupported
from pterun.llm import GenerationConfig, TextLLMRunner
from tests.llm.conftest import generate, one_token_llama
from tests.support.exporting import ExportSpec, export_program
from tests.support.llm_tokenizers import VOCAB

PROMPT = "The quick brown fox"


def test_one_token_per_call_is_fed_token_by_token_whatever_the_metadata(executorch_runner, tokenizer_path):
    """ExecuTorch prefills all at once when the metadata says enable_dynamic_shape, and fails on such a
    program; pterun goes by the shape and gives what ExecuTorch gives for the truthful metadata."""
    from executorch.extension.llm.runner import GenerationConfig as TheirConfig

    claims, truthful = one_token_llama(True), one_token_llama(False)
    theirs, _ = executorch_runner(truthful.pte, tokenizer_path)
    expected = generate(theirs, PROMPT, TheirConfig(temperature=0.0, echo=False, max_new_tokens=12))
    broken, _ = executorch_runner(claims.pte, tokenizer_path)
    with pytest.raises(RuntimeError):  # premise: ExecuTorch cannot run the program whose metadata claims more
        generate(broken, PROMPT, TheirConfig(temperature=0.0, echo=False, max_new_tokens=12))
    ours = TextLLMRunner(claims.pte, tokenizer_path)
    run = generate(ours, PROMPT, GenerationConfig(temperature=0.0, echo=False, max_new_tokens=12))
    assert not ours.prefiller.parallel_prefill
    assert run.pieces == expected.pieces


class _Fixed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, 8)
        self.out = torch.nn.Linear(8, VOCAB)

    def forward(self, tokens):
        return self.out(self.embed(tokens).mean(1))


def test_a_fixed_number_of_tokens_is_not_supported(tokenizer_path):
    exported = export_program("llm-fixed-ten-tokens-v1", lambda: ExportSpec(
        _Fixed(), (torch.zeros(1, 10, dtype=torch.long),),
        constant_methods={"get_max_seq_len": 32, "use_kv_cache": False}))
    runner = TextLLMRunner(exported.pte, tokenizer_path)
    with pytest.raises(NotSupported, match="takes exactly 10 tokens per call"):
        runner.load()
