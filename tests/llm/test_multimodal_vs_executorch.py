"""pterun.llm.MultimodalRunner against ExecuTorch's MultimodalRunner on the same programs, images and audio.

The programs are transformers' LLaVA, Gemma 3 and Voxtral from small configs, exported as optimum-executorch
exports them (tests/support/multimodal_programs.py). Greedy generation is compared piece for piece (the
tokenizer's pieces are distinct, so equal pieces are equal tokens), with the same counts in Stats; so is
sampling with ExecuTorch's seed.
"""

from __future__ import annotations

import pytest
import torch

from pterun import llm
from pterun.llm import GenerationConfig, MultimodalRunner
from tests.llm.conftest import Run
from tests.support.llm_tokenizers import BOS_ID
from tests.support.multimodal_programs import media

pytestmark = pytest.mark.slow  # tens of seconds: such files run first (tests/conftest.py)


def _inputs(module, spec: list) -> list:
    """``spec`` ((kind, value) pairs) as ``module``'s MultimodalInputs (pterun.llm or ExecuTorch's)."""
    make = {"text": module.make_text_input, "tokens": module.make_token_input, "image": module.make_image_input,
            "audio": module.make_audio_input}
    return [make[kind](value) for kind, value in spec]


def _theirs(config: GenerationConfig):
    from executorch.extension.llm.runner import GenerationConfig as TheirConfig

    return TheirConfig(echo=config.echo, max_new_tokens=config.max_new_tokens, seq_len=config.seq_len,
                       temperature=config.temperature, num_bos=config.num_bos, num_eos=config.num_eos)


def _run(runner, inputs, config) -> Run:
    run = Run()
    runner.generate(inputs, config, run.pieces.append, run.stats.append)
    return run


def _same(ours, theirs, spec: list, config: GenerationConfig) -> Run:
    from executorch.extension.llm import runner as their_module

    mine = _run(ours, _inputs(llm, spec), config)
    expected = _run(theirs, _inputs(their_module, spec), _theirs(config))
    assert mine.pieces == expected.pieces
    assert len(mine.stats) == len(expected.stats) == 1
    for name in ("num_prompt_tokens", "num_generated_tokens"):
        assert getattr(mine.stats[0], name) == getattr(expected.stats[0], name), name
    stats = mine.stats[0]
    echoed = int(config.echo and spec[-1][0] == "text")
    assert len(mine.pieces) == echoed + stats.num_generated_tokens + 1  # the prefill's token is not counted
    assert stats.num_prompt_tokens == ours.pos - stats.num_generated_tokens  # every position the inputs filled
    assert stats.model_load_start_ms <= stats.model_load_end_ms <= stats.inference_start_ms \
        <= stats.prompt_eval_end_ms == stats.first_token_ms <= stats.inference_end_ms
    return mine


def _pair(make, program):
    theirs, seed = make(program)
    return MultimodalRunner(program.pte, program.tokenizer, seed=seed), theirs


def _kind(program) -> str:
    return "image" if program.modality == "vision" else "audio"


@pytest.mark.parametrize("config", [
    dict(max_new_tokens=20, echo=False),
    dict(max_new_tokens=12, echo=True, num_bos=1),
    dict(echo=False),  # until the context is full or EOS
    dict(max_new_tokens=1, echo=False),
])
def test_greedy_generation_matches_executorch(executorch_multimodal_runner, multimodal, config):
    ours, theirs = _pair(executorch_multimodal_runner, multimodal)
    spec = [("text", "The quick"), (_kind(multimodal), media(multimodal)), ("text", " brown fox")]
    run = _same(ours, theirs, spec, GenerationConfig(temperature=0.0, **config))
    assert run.pieces, "premise: something was generated"
    assert run.stats[0].num_prompt_tokens > multimodal.media_tokens, "premise: the media filled positions"


def test_token_inputs_and_media_first_match_executorch(executorch_multimodal_runner, multimodal):
    ours, theirs = _pair(executorch_multimodal_runner, multimodal)
    spec = [("tokens", [BOS_ID, 40, 41]), (_kind(multimodal), media(multimodal, 1)), ("text", " the lazy dog")]
    _same(ours, theirs, spec, GenerationConfig(temperature=0.0, max_new_tokens=10, echo=False))
    ours.reset(), theirs.reset()
    spec = [(_kind(multimodal), media(multimodal, 2)), ("text", " what is it")]
    _same(ours, theirs, spec, GenerationConfig(temperature=0.0, max_new_tokens=10, echo=False))


def test_two_images_in_one_prompt_match_executorch(executorch_multimodal_runner, llava):
    ours, theirs = _pair(executorch_multimodal_runner, llava)
    spec = [("text", "A"), ("image", media(llava, 3)), ("text", " and B"), ("image", media(llava, 4)),
            ("text", " differ in")]
    run = _same(ours, theirs, spec, GenerationConfig(temperature=0.0, max_new_tokens=8, echo=False))
    assert run.stats[0].num_prompt_tokens > 2 * llava.media_tokens  # premise


def test_image_layouts_and_uint8_give_executorchs_tokens(executorch_multimodal_runner, llava):
    """A uint8 image is refused by the float encoder on both sides; (H, W, C) and channels-last give the tokens
    ExecuTorch gives for the same pixels in (C, H, W)."""
    ours, theirs = _pair(executorch_multimodal_runner, llava)
    chw = media(llava, 5)
    config = GenerationConfig(temperature=0.0, max_new_tokens=10, echo=False)
    expected = _same(ours, theirs, [("image", chw), ("text", " is")], config)
    for layout in (chw.permute(1, 2, 0).contiguous(), chw.permute(1, 2, 0).numpy(),
                   chw[None].contiguous(memory_format=torch.channels_last)):
        ours.reset()
        assert _run(ours, [llm.make_image_input(layout), llm.make_text_input(" is")], config).pieces == \
            expected.pieces


def test_prefill_then_generate_and_turns_match_executorch(executorch_multimodal_runner, multimodal):
    """Prefill (chat history), a turn on top, a second turn without reset: the cache continues as in
    ExecuTorch's."""
    ours, theirs = _pair(executorch_multimodal_runner, multimodal)
    from executorch.extension.llm import runner as their_module

    history = [("text", "System:"), (_kind(multimodal), media(multimodal, 6, chunks=1))]
    ours.prefill(_inputs(llm, history))
    theirs.prefill(_inputs(their_module, history))
    config = GenerationConfig(temperature=0.0, max_new_tokens=6, echo=False)
    _same(ours, theirs, [("text", " user: hi")], config)
    _same(ours, theirs, [("text", " again")], config)


def test_sampling_with_executorchs_seed_gives_its_tokens(executorch_multimodal_runner, llava):
    ours, theirs = _pair(executorch_multimodal_runner, llava)
    spec = [("image", media(llava, 7)), ("text", " the")]
    greedy = _run(ours, _inputs(llm, spec), GenerationConfig(temperature=0.0, echo=False, max_new_tokens=20))
    ours.reset()
    sampled = _same(ours, theirs, spec, GenerationConfig(temperature=1.0, echo=False, max_new_tokens=20))
    assert sampled.pieces != greedy.pieces, "premise: sampling chose other tokens than greedy"


def test_generate_text_and_hf_inputs_match_executorch(executorch_multimodal_runner, llava):
    """generate_text, and generate_text_hf of a processor-shaped BatchFeature (one image, one run of image
    tokens: what ExecuTorch's takes)."""
    from transformers.feature_extraction_utils import BatchFeature

    ours, theirs = _pair(executorch_multimodal_runner, llava)
    config = GenerationConfig(temperature=0.0, max_new_tokens=12, echo=True)
    image = media(llava, 8)
    spec = [("text", "Look:"), ("image", image), ("text", " it is")]
    from executorch.extension.llm import runner as their_module

    assert ours.generate_text(_inputs(llm, spec), config) == \
        theirs.generate_text(_inputs(their_module, spec), _theirs(config))
    ours.reset(), theirs.reset()
    ids = [BOS_ID, 40, 41] + [llava.media_token_id] * llava.media_tokens + [42, 43]
    features = BatchFeature({"input_ids": torch.tensor([ids]), "pixel_values": image[None]})
    mine = ours.generate_text_hf(features, config, llava.media_token_id)
    assert mine == their_module.generate_text_hf(theirs, features, _theirs(config), llava.media_token_id)
    assert mine, "premise: text came back"
