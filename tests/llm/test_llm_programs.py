"""The LLM programs of tests/support/llm_programs.py on pterun, against ExecuTorch's runtime and runner.

Each program is driven the way ExecuTorch's text runner drives it: the prompt's
tokens in one call (or one call per token where the program takes one token at
a time), then one call per generated token, feeding back the argmax (a program
without a KV cache gets the whole sequence every call). pterun's
logits are compared with ExecuTorch's call by call, and the argmax must be the
same token. ExecuTorch's own ``TextLLMRunner`` must then produce, from the same
program and tokenizer, the text that greedy sequence decodes to: that is the
reference the runner's differential tests rely on.
"""

from __future__ import annotations

import base64
import dataclasses
import json

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
from tests.support.llm_tokenizers import CORPUS, FORMATS, tokenizer_path
from tests.support.oracle import reference_module

pytestmark = pytest.mark.slow  # tens of seconds: such files run first (tests/conftest.py)

# ExecuTorch's pip runtime has no VulkanBackend, so the WebGPU recipe's program has its own oracle
# (eager PyTorch, tests/backends/webgpu/test_webgpu_llm.py).
ON_EXECUTORCH = tuple(v for v in programs.LLAMA_VARIANTS if not v.startswith("vulkan-"))
PROGRAMS = (*ON_EXECUTORCH, "transformers-static-cache", "transformers-qwen2-8da4w", "transformers-smollm3-8da4w",
            "bundled-example")
PROMPT = "The river runs past the mill and"
NEW_TOKENS = 10


def _program(name: str) -> programs.LlmProgram:
    if name == "bundled-example":
        return programs.example_program()
    if name == "transformers-static-cache":
        return programs.transformers_program()
    if name.startswith("transformers-"):
        return programs.transformers_program(name.removeprefix("transformers-"))
    return programs.llama_program(name)


def _assert_premises(name: str, program: programs.LlmProgram) -> None:
    """The exporter made the program the test is named after."""
    meta = program.metadata
    assert meta["use_kv_cache"] == (name != "no-kv-cache") == (program.position_input is not None), meta
    assert meta["get_bos_id"] == 1 and meta["get_eos_ids"] == [2], meta
    assert meta["get_vocab_size"] == 512
    assert meta["enable_dynamic_shape"] == (name != "static"), meta
    plan = ProgramFile(program.pte).plan("forward")
    operators = {f"{op}.{overload}" for op, overload in plan.operators}
    assert (program.data is not None) == name.endswith("-ptd")
    logits = to_torch(plan.values[plan.outputs[0]].scalar_type)
    assert logits == (torch.bfloat16 if name.endswith("-bf16") else torch.float32), logits
    if name == "xnnpack-8da4w-quantized-kv":
        assert plan.delegates and "llama::custom_quantized_sdpa.out" in operators, operators
    elif name.startswith("xnnpack-8da4w"):
        assert plan.delegates and "llama::custom_sdpa.out" in operators
    elif name.endswith("-8da4w"):  # transformers' decoders, quantized as optimum-executorch quantizes them
        from pterun.backends.xnnpack.graph import Datatype
        from tests.backends.xnnpack.programs import graphs

        layers = [n for g in graphs(program.pte) for n in g.nodes if n.kind == "XNNFullyConnected"
                  and g.values[n.p.filter_id].datatype == Datatype.QBINT4]
        biased = [n for n in layers if n.p.bias_id != 0xFFFFFFFF]
        assert len(layers) >= 14, "every linear layer of both layers and the head is an 8da4w layer"
        if name == "transformers-qwen2-8da4w":
            assert len(biased) >= 6, "the q, k and v projections of both layers are 8da4w layers with a bias"
        else:
            assert not biased, "SmolLM3's layers have no biases"
    elif name == "no-kv-cache":
        assert not plan.delegates and len(plan.inputs) == 1 and not any("llama::" in op for op in operators)
    elif name in (*ON_EXECUTORCH, "bundled-example"):
        assert not plan.delegates
        assert {"llama::custom_sdpa.out", "llama::update_cache.out"} <= operators
    else:
        assert not plan.delegates and "aten::index_put.out" in operators, operators


def _tokens(program: programs.LlmProgram, text: str) -> list[int]:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(program.tokenizer)).encode(text).ids


def _data(program: programs.LlmProgram) -> list:
    return [program.data] if program.data else []


def _load(program: programs.LlmProgram) -> pterun.Program:
    return pterun.Runtime.get().load_program(program.pte, data_path=_data(program) or None)


def _calls(program: programs.LlmProgram, sequence: list[int], chunk: list[int]) -> list[torch.Tensor]:
    """The inputs of the call that feeds ``chunk``, the last tokens of ``sequence``."""
    if program.position_input is None:  # no cache: the whole sequence every call
        return [torch.tensor([sequence])]
    start = len(sequence) - len(chunk)
    if program.position_input == "cache_position":
        return [torch.tensor([chunk]), torch.arange(start, len(sequence))]
    return [torch.tensor([chunk]), torch.tensor([start])]


def _last_argmax(logits: torch.Tensor) -> int:
    return int(logits.reshape(-1, logits.shape[-1])[-1].argmax())


def _greedy_both(name: str, program: programs.LlmProgram, prompt: list[int], new_tokens: int,
                 chunk: int | None = None) -> list[int]:
    """Greedy decoding on both runtimes, compared call by call; returns the generated tokens. The prompt goes
    in ``chunk`` tokens a call (all at once by default; one at a time where the program takes one)."""
    ours = _load(program).load_method("forward")
    theirs = reference_module(program.pte, _data(program))
    if program.position_input is None:
        size = len(prompt)  # the whole sequence goes in each call
    else:
        size = (chunk or len(prompt)) if program.dynamic else 1
    chunks = [prompt[i:i + size] for i in range(0, len(prompt), size)]
    sequence, generated = [], []
    for step in range(len(chunks) + new_tokens - 1):
        fed = chunks[step] if step < len(chunks) else [generated[-1]]
        sequence += fed
        inputs = _calls(program, sequence, fed)
        actual = ours.execute([x.clone() for x in inputs])
        expected = list(theirs.run_method("forward", [x.clone() for x in inputs]))
        what = f"{name}: logits after {len(sequence)} tokens"
        assert_matches(actual, expected, what=what)
        if step >= len(chunks) - 1:
            token = _last_argmax(expected[0])
            assert _last_argmax(actual[0]) == token, f"{what}: argmax differs"
            generated.append(token)
    return generated


@pytest.mark.parametrize("name", PROGRAMS)
def test_metadata_methods_match_executorch(name):
    program = _program(name)
    _assert_premises(name, program)
    loaded = _load(program)
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
    plan = ProgramFile(program.pte).plan("forward")
    longest = plan.values[plan.inputs[0]].sizes[1]  # the token count's upper bound as the program declares it
    # Without a cache the whole sequence goes in each call, so the token bound is the context.
    context = program.metadata["get_max_context_len"] if program.position_input else longest
    prompt = _tokens(program, CORPUS.read_text())[: context - 20]
    if name in ("dynamic", "xnnpack-8da4w"):
        assert longest == program.metadata["get_max_seq_len"] - 1 < len(prompt), (longest, len(prompt))
    _greedy_both(name, program, prompt, context - len(prompt) + 1, chunk=longest)


def _runner_pieces(program: programs.LlmProgram, prompt: str, max_new_tokens: int) -> tuple[list, object]:
    from executorch.extension.llm.runner import GenerationConfig, TextLLMRunner

    runner = TextLLMRunner(str(program.pte), str(program.tokenizer), *map(str, _data(program)))
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


# Llama 3's pre-tokenizer pattern, which ExecuTorch's tiktoken reader splits text with.
_LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                   r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def _codec(kind: str):
    """(encode, decode one token) for a tokenizer file, with the format's own Python library."""
    if kind in ("sentencepiece", "llama2c"):
        import sentencepiece

        sp = sentencepiece.SentencePieceProcessor(model_file=str(tokenizer_path("sentencepiece")))
        return sp.encode, lambda t: sp.id_to_piece(t).replace("\u2581", " ")
    if kind == "tiktoken":
        ranks = {}
        for line in tokenizer_path("tiktoken").read_text().splitlines():
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
        return _ranked_codec(ranks, _LLAMA3_PATTERN, 0)
    if kind == "tekken":  # ranked tokens after the control tokens, split by the file's own pattern
        tekken = json.loads(tokenizer_path("tekken").read_text())
        ranks = {base64.b64decode(t["token_bytes"]): t["rank"] for t in tekken["vocab"]}
        return _ranked_codec(ranks, tekken["config"]["pattern"], len(tekken["special_tokens"]))
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_path("hf")))
    return (lambda text: tokenizer.encode(text).ids), (lambda t: tokenizer.decode([t]))


def _ranked_codec(ranks: dict[bytes, int], pattern: str, first: int):
    import tiktoken

    encoding = tiktoken.Encoding("corpus", pat_str=pattern, mergeable_ranks=ranks, special_tokens={})
    return (lambda text: [first + t for t in encoding.encode_ordinary(text)],
            lambda t: encoding.decode_single_token_bytes(t - first).decode())


@pytest.mark.parametrize("kind", FORMATS)
def test_executorch_runner_reads_each_tokenizer_format(kind):
    """ExecuTorch's runner, given the tokenizer in each format it reads, encodes the prompt as that format's
    own library does and prints the greedy sequence's pieces as that library decodes them."""
    program = dataclasses.replace(programs.llama_program("dynamic"), tokenizer=tokenizer_path(kind))
    encode, decode = _codec(kind)
    prompt = encode(PROMPT)
    pieces, stats = _runner_pieces(program, PROMPT, NEW_TOKENS)
    assert stats.num_prompt_tokens == len(prompt)
    generated = _greedy_both("dynamic", program, prompt, NEW_TOKENS)
    assert pieces == [decode(t) for t in generated], generated
