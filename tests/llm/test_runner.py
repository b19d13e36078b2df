"""What pterun.llm's TextLLMRunner promises beyond matching ExecuTorch token for token."""

from __future__ import annotations

import threading

import pytest

from pterun.llm import GenerationConfig, TextLLMRunner
from tests.llm.conftest import Run, generate
from tests.support.llm_tokenizers import VOCAB
from tests.support.llm_tokenizers import tokenizer_path as tokenizer_file

PROMPT = "The quick brown fox"


def _greedy(**fields) -> GenerationConfig:
    return GenerationConfig(temperature=0.0, echo=False, **fields)


def test_stats_are_consistent_and_callbacks_see_each_token_once(llama, tokenizer_path):
    runner = TextLLMRunner(llama, tokenizer_path)
    assert not runner.is_loaded()
    run = generate(runner, PROMPT, _greedy(max_new_tokens=20))
    assert runner.is_loaded()
    (stats,) = run.stats
    assert stats.num_prompt_tokens == len(runner.tokenizer.encode(PROMPT))
    assert len(run.pieces) == stats.num_generated_tokens + 1  # the token prefill chose, then one per step
    assert stats.num_generated_tokens == 19 or runner.eos_ids & set(runner.tokenizer.encode(run.text))
    assert 0 < stats.model_load_start_ms <= stats.model_load_end_ms <= stats.inference_start_ms
    assert stats.inference_start_ms <= stats.prompt_eval_end_ms == stats.first_token_ms
    assert stats.first_token_ms <= stats.inference_end_ms
    assert stats.model_execution_start_ms <= stats.model_execution_end_ms <= stats.inference_end_ms
    assert 0 <= stats.aggregate_model_execution_time_ms <= stats.inference_end_ms - stats.inference_start_ms
    assert stats.aggregate_sampling_time_ms >= 0
    generated = stats.num_generated_tokens
    runner.reset()
    assert stats.num_generated_tokens == generated  # a snapshot, as ExecuTorch's callback gets


def test_echo_passes_the_prompt_first(dynamic_llama, tokenizer_path):
    runner = TextLLMRunner(dynamic_llama, tokenizer_path)
    echoed = generate(runner, PROMPT, GenerationConfig(temperature=0.0, max_new_tokens=5))
    runner.reset()
    plain = generate(runner, PROMPT, _greedy(max_new_tokens=5))
    assert echoed.pieces == [PROMPT] + plain.pieces


def test_stop_from_the_callback_ends_generation(dynamic_llama, tokenizer_path):
    runner = TextLLMRunner(dynamic_llama, tokenizer_path)
    run = Run()

    def on_piece(piece):
        run.pieces.append(piece)
        if len(run.pieces) == 3:
            runner.stop()

    runner.generate(PROMPT, _greedy(max_new_tokens=50), on_piece, run.stats.append)
    assert len(run.pieces) == 3 and run.stats[0].num_generated_tokens == 2
    # A stop asked for during the first token's callback counts too (ExecuTorch's loop forgets it).
    runner.reset()
    first = Run()
    runner.generate(PROMPT, _greedy(max_new_tokens=50), lambda p: (first.pieces.append(p), runner.stop()),
                    first.stats.append)
    assert len(first.pieces) == 1 and first.stats[0].num_generated_tokens == 0
    # The next generation is not stopped by the last one's request.
    runner.reset()
    assert len(generate(runner, PROMPT, _greedy(max_new_tokens=10)).pieces) == 10


def test_stop_from_another_thread(dynamic_llama, tokenizer_path):
    runner = TextLLMRunner(dynamic_llama, tokenizer_path)
    pieces = []

    def on_piece(piece):
        pieces.append(piece)
        if len(pieces) == 5:  # another thread asks while this token is being produced
            other = threading.Thread(target=runner.stop)
            other.start()
            other.join()

    runner.generate(PROMPT, _greedy(max_new_tokens=50), on_piece)
    assert len(pieces) == 5


def test_reset_gives_the_same_output_twice(dynamic_llama, tokenizer_path):
    runner = TextLLMRunner(dynamic_llama, tokenizer_path)
    first = generate(runner, PROMPT, _greedy(max_new_tokens=15))
    continued = generate(runner, PROMPT, _greedy(max_new_tokens=15))
    assert continued.pieces != first.pieces, "premise: without reset the cache carries the first turn"
    runner.reset()
    assert generate(runner, PROMPT, _greedy(max_new_tokens=15)).pieces == first.pieces


def test_same_seed_same_tokens(dynamic_llama, tokenizer_path):
    config = GenerationConfig(temperature=1.0, echo=False, max_new_tokens=25)
    runs = [generate(TextLLMRunner(dynamic_llama, tokenizer_path, seed=seed), PROMPT, config).pieces
            for seed in (7, 7, 8)]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_warmup_leaves_the_runner_as_new(dynamic_llama, tokenizer_path):
    runner = TextLLMRunner(dynamic_llama, tokenizer_path)
    runner.warmup(PROMPT, 5)
    assert runner.is_loaded() and runner.pos == 0
    fresh = TextLLMRunner(dynamic_llama, tokenizer_path)
    assert generate(runner, PROMPT, _greedy(max_new_tokens=8)).pieces == \
        generate(fresh, PROMPT, _greedy(max_new_tokens=8)).pieces


def test_vocab_size_is_the_programs(dynamic_llama):
    runner = TextLLMRunner(dynamic_llama, tokenizer_file("tiktoken"))  # with Llama 3's special tokens after
    assert runner.get_vocab_size() == VOCAB
    assert runner.tokenizer.vocab_size != VOCAB  # premise: the tokenizer's is not the same number


def test_text_is_whole_characters_where_executorch_raises(executorch_runner, dynamic_llama,
                                                          byte_tokenizer_path):
    from executorch.extension.llm.runner import GenerationConfig as TheirConfig

    theirs, _ = executorch_runner(dynamic_llama, byte_tokenizer_path)
    with pytest.raises(UnicodeDecodeError):  # premise: the tokens include parts of characters
        config = TheirConfig(temperature=0.0, echo=False, max_new_tokens=60)
        theirs.generate(PROMPT, config, lambda piece: None)
    runner = TextLLMRunner(dynamic_llama, byte_tokenizer_path)
    runner.load()
    tokens = []
    sample = runner.sampler.sample
    runner.sampler.sample = lambda logits: tokens.append(sample(logits)) or tokens[-1]
    run = generate(runner, PROMPT, _greedy(max_new_tokens=60))
    whole = b"".join(runner.tokenizer.token_bytes(t) for t in tokens).decode("utf-8", "replace")
    assert run.text == whole
    assert len(run.pieces) < len(tokens)


def test_a_prompt_length_seen_before_comes_at_the_same_addresses(dynamic_llama, tokenizer_path):
    """A method run as CUDA graphs replays a prompt's graph only where its inputs come at the addresses the graph
    was captured with: the decoder passes every call's tokens and positions in tensors it keeps."""
    runner = TextLLMRunner(dynamic_llama, tokenizer_path)
    runner.load()
    decoder = runner.prefiller
    assert decoder.parallel_prefill, "premise: the prompt goes in whole"
    seen = []
    method = decoder.method
    execute = method.execute
    method.execute = lambda inputs, **kw: seen.append([(t.data_ptr(), tuple(t.shape)) for t in inputs]) \
        or execute(inputs, **kw)
    first = generate(runner, PROMPT, _greedy(max_new_tokens=4))
    runner.reset()
    assert generate(runner, PROMPT, _greedy(max_new_tokens=4)).pieces == first.pieces
    prompts = [call for call in seen if call[0][1][1] > 1]
    assert len(prompts) == 2 and prompts[0] == prompts[1], prompts
    steps = {tuple(call) for call in seen if call[0][1][1] == 1}
    assert len(steps) == 1, "every one-token step at the same addresses too"
