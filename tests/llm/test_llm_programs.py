"""The LLM programs of tests/support/llm_programs.py on pterun, against ExecuTorch's runtime and runner.

Each program is driven the way ExecuTorch's text runner drives it: the prompt's
tokens in one call (or one call per token where the program takes one token at
a time), then one call per generated token, feeding back the argmax. pterun's
logits are compared with ExecuTorch's call by call, and the argmax must be the
same token. ExecuTorch's own ``TextLLMRunner`` must then produce, from the same
program and tokenizer, the text that greedy sequence decodes to: that is the
reference the runner's differential tests rely on.
"""

from __future__ import annotations

# The llama:: and quantized_decomposed:: kernels, for ExecuTorch's runtime and its runner.
import executorch.extension.llm.custom_ops.custom_ops
import executorch.kernels.quantized  # noqa: F401
import pytest
import torch

import pterun
from pterun.core.dtype import to_torch
from pterun.format import ProgramFile
from tests.support import llm_programs as programs
from tests.support.compare import assert_matches
from tests.support.oracle import reference_module

PROGRAMS = (*programs.LLAMA_VARIANTS, "transformers-static-cache", "bundled-example")
PROMPT = "The river runs past the mill and"
NEW_TOKENS = 10


def _program(name: str) -> programs.LlmProgram:
    if name == "bundled-example":
        return programs.example_program()
    if name == "transformers-static-cache":
        return programs.transformers_program()
    return programs.llama_program(name)


def _operators(pte) -> set[str]:
    return {f"{op}.{overload}" for op, overload in ProgramFile(pte).plan("forward").operators}


def _assert_premises(name: str, program: programs.LlmProgram) -> None:
    """The exporter made the program the test is named after."""
    meta = program.metadata
    assert meta["use_kv_cache"] and meta["get_bos_id"] == 1 and meta["get_eos_ids"] == [2], meta
    assert meta["get_vocab_size"] == 512
    assert meta["enable_dynamic_shape"] == (name != "static"), meta
    plan = ProgramFile(program.pte).plan("forward")
    assert (program.data is not None) == name.endswith("-ptd")
    logits = to_torch(plan.values[plan.outputs[0]].scalar_type)
    assert logits == (torch.bfloat16 if name.endswith("-bf16") else torch.float32), logits
    if name.startswith("xnnpack-8da4w"):
        assert plan.delegates and "llama::custom_sdpa.out" in _operators(program.pte)
    elif name in (*programs.LLAMA_VARIANTS, "bundled-example"):
        assert not plan.delegates
        assert {"llama::custom_sdpa.out", "llama::update_cache.out"} <= _operators(program.pte)
    else:
        assert not plan.delegates and "aten::index_put.out" in _operators(program.pte), _operators(program.pte)


def _tokens(program: programs.LlmProgram, text: str) -> list[int]:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(program.tokenizer)).encode(text).ids


def _positions(program: programs.LlmProgram, start: int, count: int) -> torch.Tensor:
    if program.position_input == "cache_position":
        return torch.arange(start, start + count)
    return torch.tensor([start])


def _greedy_both(name: str, program: programs.LlmProgram, prompt: list[int], new_tokens: int,
                 chunk: int | None = None) -> list[int]:
    """Greedy decoding on both runtimes, compared call by call; returns the generated tokens. The prompt goes
    in ``chunk`` tokens a call (all at once by default; one at a time where the program takes one)."""
    data = [program.data] if program.data else []
    ours = pterun.Runtime.get().load_program(program.pte, data_path=data or None).load_method("forward")
    theirs = reference_module(program.pte, data)
    size = (chunk or len(prompt)) if program.dynamic else 1
    chunks = [prompt[i:i + size] for i in range(0, len(prompt), size)]
    generated, position = [], 0
    for step in range(len(chunks) + new_tokens - 1):
        tokens = chunks[step] if step < len(chunks) else [generated[-1]]
        inputs = [torch.tensor([tokens]), _positions(program, position, len(tokens))]
        actual = ours.execute([x.clone() for x in inputs])
        expected = list(theirs.run_method("forward", [x.clone() for x in inputs]))
        what = f"{name}: logits after {position + len(tokens)} tokens"
        assert_matches(actual, expected, what=what)
        position += len(tokens)
        if step >= len(chunks) - 1:
            token = int(expected[0].reshape(-1, expected[0].shape[-1])[-1].argmax())
            assert int(actual[0].reshape(-1, actual[0].shape[-1])[-1].argmax()) == token, f"{what}: argmax differs"
            generated.append(token)
    return generated


@pytest.mark.parametrize("name", PROGRAMS)
def test_metadata_methods_match_executorch(name):
    program = _program(name)
    _assert_premises(name, program)
    loaded = pterun.Runtime.get().load_program(program.pte, data_path=[program.data] if program.data else None)
    for method, value in program.metadata.items():
        out = loaded.load_method(method).execute([])
        assert (list(out) if method.endswith("_ids") else out[0]) == value, method


@pytest.mark.parametrize("name", PROGRAMS)
def test_greedy_decoding_matches_executorch_call_by_call(name):
    program = _program(name)
    _assert_premises(name, program)
    prompt = _tokens(program, PROMPT)
    assert len(prompt) > 1
    generated = _greedy_both(name, program, prompt, NEW_TOKENS)
    assert len(generated) == NEW_TOKENS


@pytest.mark.parametrize("name", PROGRAMS)
def test_chunked_prompt_to_a_full_context_matches_executorch(name):
    """A prompt longer than one call takes, in the longest chunks the program accepts, then decoding until
    the last position of the context."""
    program = _program(name)
    context = program.metadata["get_max_context_len"]
    plan = ProgramFile(program.pte).plan("forward")
    longest = plan.values[plan.inputs[0]].sizes[1]  # the token count's upper bound, as the program declares it
    prompt = _tokens(program, programs.CORPUS.read_text())[: context - 20]
    if name in ("dynamic", "xnnpack-8da4w"):
        assert longest == program.metadata["get_max_seq_len"] - 1 < len(prompt), (longest, len(prompt))
    _greedy_both(name, program, prompt, context - len(prompt) + 1, chunk=longest)


def _runner_pieces(program: programs.LlmProgram, prompt: str, max_new_tokens: int) -> tuple[list[str], object]:
    from executorch.extension.llm.runner import GenerationConfig, TextLLMRunner

    runner = TextLLMRunner(str(program.pte), str(program.tokenizer), str(program.data) if program.data else None)
    pieces, stats = [], []
    config = GenerationConfig(max_new_tokens=max_new_tokens, temperature=0.0, echo=False)
    runner.generate(prompt, config, token_callback=pieces.append, stats_callback=stats.append)
    return pieces, stats[0]


@pytest.mark.parametrize("name", PROGRAMS)
def test_executorch_runner_generates_the_greedy_sequence(name):
    from tokenizers import Tokenizer

    program = _program(name)
    prompt = _tokens(program, PROMPT)
    pieces, stats = _runner_pieces(program, PROMPT, NEW_TOKENS)
    # A piece per token; ExecuTorch's Stats leave out the token the prefill sampled.
    assert len(pieces) == NEW_TOKENS and stats.num_generated_tokens == NEW_TOKENS - 1, (pieces, stats)
    assert stats.num_prompt_tokens == len(prompt)
    generated = _greedy_both(name, program, prompt, NEW_TOKENS)
    tokenizer = Tokenizer.from_file(str(program.tokenizer))
    assert pieces == [tokenizer.decode([t]) for t in generated], generated


def test_bundled_example_continues_its_training_text():
    """The shipped model was trained on the shipped text: greedy decoding from the opening of a paragraph
    recites the rest of it."""
    pieces, _ = _runner_pieces(programs.example_program(), "The river runs", 16)
    assert "".join(pieces).startswith(" past the mill and under the old stone bridge")
