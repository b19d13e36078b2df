"""pterun.llm's TextLLMRunner against ExecuTorch's, token for token, on each kind of program an LLM exporter
writes: the example Llama with static (one token per call) prefill, its XNNPACK 8da4w variants (weights in the
program, or in a .ptd), a transformers decoder exported with a static cache, and the bundled example."""

from __future__ import annotations

import pytest

from pterun.llm import GenerationConfig, TextLLMRunner
from tests.llm.conftest import generate
from tests.support import llm_programs

pytestmark = pytest.mark.slow  # tens of seconds: such files run first (tests/conftest.py)

PROGRAMS = {
    "static-prefill": lambda: llm_programs.llama_program("static"),
    "xnnpack-8da4w": lambda: llm_programs.llama_program("xnnpack-8da4w"),
    "xnnpack-8da4w-ptd": lambda: llm_programs.llama_program("xnnpack-8da4w-ptd"),
    "transformers-static-cache": llm_programs.transformers_program,
    "bundled-example": llm_programs.example_program,
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_greedy_generation_is_executorchs_token_for_token(name):
    llm = pytest.importorskip("executorch.extension.llm.runner")
    pytest.importorskip("executorch.extension.llm.custom_ops.custom_ops")
    program = PROGRAMS[name]()
    # Premises: each program is the kind it is named for.
    assert (program.position_input == "cache_position") == (name == "transformers-static-cache")
    assert (program.data is not None) == name.endswith("-ptd")
    assert program.dynamic == (name != "static-prefill")
    data = None if program.data is None else str(program.data)
    ours = TextLLMRunner(str(program.pte), str(program.tokenizer), data)
    theirs = llm.TextLLMRunner(str(program.pte), str(program.tokenizer), data) if data else \
        llm.TextLLMRunner(str(program.pte), str(program.tokenizer))
    prompt = "The river runs"
    config = dict(temperature=0.0, echo=False, max_new_tokens=24)
    mine = generate(ours, prompt, GenerationConfig(**config))
    expected = generate(theirs, prompt, llm.GenerationConfig(**config))
    assert len(expected.pieces) > 3, "premise: ExecuTorch's runner generated text"
    assert mine.pieces == expected.pieces
    for field in ("num_prompt_tokens", "num_generated_tokens"):
        assert getattr(mine.stats[-1], field) == getattr(expected.stats[-1], field), field
