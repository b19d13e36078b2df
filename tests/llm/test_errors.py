"""Misuse and programs that are not LLMs: typed errors before any kernel sees a wrong shape."""

from __future__ import annotations

import pytest
import torch

from pterun.errors import InvalidArgument, InvalidProgram, InvalidState, PteError
from pterun.llm import GenerationConfig, TextLLMRunner
from tests.llm.conftest import generate
from tests.support.exporting import ExportSpec, export_program
from tests.support.llm_programs import MAX_CONTEXT_LEN

PROMPT = "The quick brown fox"


class _Scale(torch.nn.Module):
    def forward(self, x):
        return x * 2.0


def test_a_program_without_metadata_is_not_an_llm(tokenizer_path):
    exported = export_program("llm-not-an-llm-v1", lambda: ExportSpec(_Scale(), (torch.ones(1, 4),)))
    with pytest.raises(InvalidProgram, match="get_max_seq_len not found"):
        TextLLMRunner(exported.pte, tokenizer_path)


def test_a_program_without_a_token_input_is_not_an_llm(tokenizer_path):
    exported = export_program("llm-float-input-v1", lambda: ExportSpec(
        _Scale(), (torch.ones(1, 4),), constant_methods={"get_max_seq_len": 16}))
    runner = TextLLMRunner(exported.pte, tokenizer_path)
    with pytest.raises(InvalidProgram, match=r"expected a tokens input \[1, n\] of int64, found \[1, 4\]"):
        generate(runner, PROMPT, GenerationConfig())


def test_a_prompt_longer_than_the_context(dynamic_llama, tokenizer_path):
    runner = TextLLMRunner(dynamic_llama, tokenizer_path)
    long_prompt = " ".join(["the quick brown fox"] * 40)
    assert len(runner.tokenizer.encode(long_prompt)) >= MAX_CONTEXT_LEN, "premise: longer than the context"
    with pytest.raises(InvalidArgument, match=f"max_context_len {MAX_CONTEXT_LEN}"):
        generate(runner, long_prompt, GenerationConfig(temperature=0.0))
    assert runner.pos == 0


def test_a_full_context_stops_cleanly_then_refuses_more(dynamic_llama, tokenizer_path):
    runner = TextLLMRunner(dynamic_llama, tokenizer_path)
    run = generate(runner, PROMPT, GenerationConfig(temperature=0.0, echo=False, max_new_tokens=500))
    last = MAX_CONTEXT_LEN - 1
    assert runner.pos == last and run.stats[0].num_generated_tokens == last - run.stats[0].num_prompt_tokens
    with pytest.raises(InvalidArgument, match=f"max_context_len {MAX_CONTEXT_LEN}"):
        generate(runner, " more", GenerationConfig(temperature=0.0))


def test_misuse(dynamic_llama, tokenizer_path):
    runner = TextLLMRunner(dynamic_llama, tokenizer_path)
    with pytest.raises(InvalidState, match="prior prefill"):
        generate(runner, "", GenerationConfig())
    with pytest.raises(InvalidArgument, match=r"Temperature must be in \[0, 1\]"):
        generate(runner, PROMPT, GenerationConfig(temperature=1.5))
    with pytest.raises(InvalidArgument, match="Max new tokens 0"):
        generate(runner, PROMPT, GenerationConfig(seq_len=3))
    assert issubclass(InvalidArgument, PteError) and issubclass(PteError, RuntimeError)
