"""pterun.llm against ExecuTorch's TextLLMRunner on the example Llama from ExecuTorch's LLM export.

Greedy generation is compared piece for piece (each piece is one token's text, and the tokenizer's
pieces are distinct, so equal pieces are equal tokens), with the same counts in Stats; temperature
sampling with ExecuTorch's seed (the second its runner was made) gives the same tokens too.
"""

from __future__ import annotations

import pytest

from pterun.llm import GenerationConfig, Stats, TextLLMRunner
from tests.llm.conftest import generate, one_token_llama
from tests.support.llm_programs import MAX_CONTEXT_LEN
from tests.support.llm_tokenizers import tokenizer_path as tokenizer_file

pytestmark = pytest.mark.slow  # tens of seconds: such files run first (tests/conftest.py)

PROMPT = "The quick brown fox"


def _pair(executorch_runner, pte, tokenizer):
    theirs, seed = executorch_runner(pte, tokenizer)
    return TextLLMRunner(pte, tokenizer, seed=seed), theirs


def _theirs(config: GenerationConfig):
    from executorch.extension.llm.runner import GenerationConfig as TheirConfig

    return TheirConfig(echo=config.echo, max_new_tokens=config.max_new_tokens, warming=config.warming,
                       seq_len=config.seq_len, temperature=config.temperature, num_bos=config.num_bos,
                       num_eos=config.num_eos)


def _same(ours, theirs, prompt, config):
    mine, expected = generate(ours, prompt, config), generate(theirs, prompt, _theirs(config))
    assert mine.pieces == expected.pieces
    assert len(mine.stats) == len(expected.stats) == 1
    for name in ("num_prompt_tokens", "num_generated_tokens"):
        assert getattr(mine.stats[0], name) == getattr(expected.stats[0], name), name
    return mine


@pytest.mark.parametrize("config", [
    dict(max_new_tokens=40, echo=False),
    dict(max_new_tokens=12, echo=True),
    dict(max_new_tokens=10, num_bos=1, echo=False),
    dict(seq_len=30, echo=False),
    dict(max_new_tokens=1, echo=False),
])
def test_greedy_generation_matches_executorch(executorch_runner, llama, tokenizer_path, config):
    ours, theirs = _pair(executorch_runner, llama, tokenizer_path)
    run = _same(ours, theirs, PROMPT, GenerationConfig(temperature=0.0, **config))
    assert run.pieces, "premise: something was generated"


@pytest.mark.parametrize("kind", ["sentencepiece", "llama2c", "tekken"])
def test_other_tokenizer_formats_match_executorch(executorch_runner, dynamic_llama, kind):
    ours, theirs = _pair(executorch_runner, dynamic_llama, tokenizer_file(kind))
    assert ours.tokenizer.kind == kind  # premise
    _same(ours, theirs, PROMPT, GenerationConfig(temperature=0.0, num_bos=1, max_new_tokens=40))
    ours.reset(), theirs.reset()
    _same(ours, theirs, PROMPT, GenerationConfig(temperature=1.0, echo=False, max_new_tokens=40))


def test_whole_context_matches_executorch(executorch_runner, dynamic_llama, tokenizer_path):
    """Without limits generation runs until the context is full: every position is compared."""
    ours, theirs = _pair(executorch_runner, dynamic_llama, tokenizer_path)
    run = _same(ours, theirs, PROMPT, GenerationConfig(temperature=0.0, echo=False))
    prompt_tokens = run.stats[0].num_prompt_tokens
    # premise: no EOS, the context filled
    assert run.stats[0].num_generated_tokens == MAX_CONTEXT_LEN - prompt_tokens - 1


def test_a_program_without_kv_cache_matches_executorch(executorch_runner, uncached_llama, tokenizer_path):
    ours, theirs = _pair(executorch_runner, uncached_llama, tokenizer_path)
    assert not ours.metadata.use_kv_cache  # premise
    _same(ours, theirs, PROMPT, GenerationConfig(temperature=0.0, echo=False, max_new_tokens=30))
    ours.reset(), theirs.reset()
    _same(ours, theirs, PROMPT, GenerationConfig(temperature=0.8, echo=False, max_new_tokens=30))


def test_bfloat16_logits_match_executorch(executorch_runner, bf16_llama, tokenizer_path):
    ours, theirs = _pair(executorch_runner, bf16_llama, tokenizer_path)
    ours.load()
    assert ours.decoder.method.method_meta().output_tensor_meta(0).dtype() == 15  # premise: bfloat16 logits
    _same(ours, theirs, PROMPT, GenerationConfig(temperature=0.0, echo=False, max_new_tokens=40))


def test_weights_in_a_ptd_file_match_executorch(executorch_runner, tokenizer_path):
    exported = one_token_llama(False, external=True)
    assert exported.ptd, "premise: the weights are in a .ptd file"
    ours = TextLLMRunner(exported.pte, tokenizer_path, str(exported.ptd[0]))
    from executorch.extension.llm.runner import TextLLMRunner as TheirRunner

    theirs = TheirRunner(str(exported.pte), str(tokenizer_path), str(exported.ptd[0]))
    _same(ours, theirs, PROMPT, GenerationConfig(temperature=0.0, echo=False, max_new_tokens=20))


def test_eos_from_the_program_ends_generation_as_executorch(executorch_runner, static_llama, tokenizer_path):
    ours, theirs = _pair(executorch_runner, static_llama, tokenizer_path)
    run = _same(ours, theirs, PROMPT, GenerationConfig(temperature=0.0, echo=False, max_new_tokens=60))
    assert run.stats[0].num_generated_tokens < 59, "premise: an EOS id from get_eos_ids ended generation"


def test_turns_continue_the_cache_as_executorch(executorch_runner, llama, tokenizer_path):
    """Two generate calls without reset, then prefill and generate(""), then reset: all the same."""
    ours, theirs = _pair(executorch_runner, llama, tokenizer_path)
    config = GenerationConfig(temperature=0.0, echo=False, max_new_tokens=8)
    _same(ours, theirs, PROMPT, config)
    _same(ours, theirs, " the lazy dog", config)
    ours.prefill(" every piece", config)
    theirs.prefill(" every piece", _theirs(config))
    _same(ours, theirs, "", config)
    ours.reset(), theirs.reset()
    _same(ours, theirs, PROMPT, config)


def test_sampling_with_executorchs_seed_gives_its_tokens(executorch_runner, dynamic_llama, tokenizer_path):
    ours, theirs = _pair(executorch_runner, dynamic_llama, tokenizer_path)
    greedy = generate(ours, PROMPT, GenerationConfig(temperature=0.0, echo=False, max_new_tokens=30))
    ours.reset()
    for temperature in (0.8, 1.0, 0.8):  # the generator's state carries over from call to call
        sampled = _same(ours, theirs, PROMPT, GenerationConfig(temperature=temperature, echo=False,
                                                               max_new_tokens=30))
        ours.reset(), theirs.reset()
        assert sampled.pieces != greedy.pieces, "premise: sampling chose other tokens than greedy"


def test_stats_json_is_executorchs(executorch_runner, dynamic_llama, tokenizer_path):
    """The JSON of ExecuTorch's Stats, rebuilt field by field in pterun's, is the same string."""
    ours, theirs = _pair(executorch_runner, dynamic_llama, tokenizer_path)
    config = _theirs(GenerationConfig(temperature=0.0, max_new_tokens=20))
    expected = generate(theirs, PROMPT, config).stats[0]
    fields = [name for name in dir(expected) if name.endswith("_ms") or name.startswith("num_")]
    copy = Stats(**{name: getattr(expected, name) for name in fields})
    assert copy.to_json_string() == expected.to_json_string()


def test_stats_json_writes_rates_as_cpp_streams_do():
    stats = Stats(inference_start_ms=1000, prompt_eval_end_ms=1003, inference_end_ms=1010,
                  num_prompt_tokens=7, num_generated_tokens=9)
    assert stats.to_json_string().startswith(
        '{"prefill_token_per_sec":2333.33,"decode_token_per_sec":1285.71,"prompt_tokens":7,"generated_tokens":9,')


@pytest.mark.parametrize("name", ["GenerationConfig", "Stats", "TextLLMRunner"])
def test_every_public_name_of_executorchs_class_is_here(name):
    import executorch.extension.llm.runner as theirs

    from pterun import llm

    ours = llm.Stats() if name == "Stats" else getattr(llm, name)  # Stats' fields are its instances'
    missing = {a for a in dir(getattr(theirs, name)) if not a.startswith("_")} - set(dir(ours))
    assert not missing
