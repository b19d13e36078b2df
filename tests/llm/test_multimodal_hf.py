"""generate_hf beyond ExecuTorch's (one image, one run of image tokens, image_token_id required): several images,
audio features, the token ids from the program's metadata; each gives what the same inputs given as a list give.
(One image with image_token_id is compared with ExecuTorch's own in test_multimodal_vs_executorch.py.)"""

from __future__ import annotations

import pytest
import torch
from transformers.feature_extraction_utils import BatchFeature

from pterun.errors import InvalidArgument
from pterun.llm import (
    GenerationConfig,
    MultimodalRunner,
    generate_text_hf,
    make_audio_input,
    make_image_input,
    make_token_input,
)
from pterun.llm.hf import hf_to_multimodal_inputs
from tests.support.multimodal_programs import media

CONFIG = GenerationConfig(temperature=0.0, max_new_tokens=8, echo=False)


def _text(runner, inputs) -> str:
    runner.reset()
    return runner.generate_text(inputs, CONFIG)


def test_two_images_and_the_programs_image_token(llava):
    runner = MultimodalRunner(llava.pte, llava.tokenizer)
    assert "vision_token_id" in runner.program.method_names  # premise: optimum-executorch wrote it
    run = [llava.media_token_id] * llava.media_tokens
    ids = [1, 40] + run + [41, 42] + run + [43]
    images = torch.stack([media(llava, 1), media(llava, 2)])
    features = BatchFeature({"input_ids": torch.tensor([ids]), "pixel_values": images})
    expected = _text(runner, [make_token_input([1, 40]), make_image_input(images[0]), make_token_input([41, 42]),
                              make_image_input(images[1]), make_token_input([43])])
    runner.reset()
    assert runner.generate_text_hf(features, CONFIG) == expected and expected
    runner.reset()
    assert generate_text_hf(runner, features, CONFIG, llava.media_token_id) == expected


def test_audio_features_and_the_programs_audio_token(voxtral):
    runner = MultimodalRunner(voxtral.pte, voxtral.tokenizer)
    features = media(voxtral, 3, chunks=2)
    ids = [1, 40] + [voxtral.media_token_id] * (2 * voxtral.media_tokens) + [41]
    expected = _text(runner, [make_token_input([1, 40]), make_audio_input(features), make_token_input([41])])
    runner.reset()
    assert runner.generate_text_hf({"input_ids": torch.tensor(ids), "input_features": features}, CONFIG) == expected
    # One run a chunk where there are as many runs as chunks.
    chunk = [voxtral.media_token_id] * voxtral.media_tokens
    split = [1] + chunk + [40] + chunk
    inputs = hf_to_multimodal_inputs({"input_ids": torch.tensor(split), "input_features": features}, runner=runner)
    assert [i.kind for i in inputs] == ["tokens", "audio", "tokens", "audio"]
    assert inputs[1].get_audio().batch_size == inputs[3].get_audio().batch_size == 1


@pytest.mark.parametrize("features, message", [
    (lambda t, n: {"input_ids": torch.tensor([[1] + [t] * (n - 1) + [2]]), "pixel_values": torch.zeros(1, 3, 32, 32)},
     "a run of 15 image tokens at 1 in input_ids, where the encoder fills 16 positions"),
    (lambda t, n: {"input_ids": torch.tensor([[1] + [t] * n]), "pixel_values": torch.zeros(2, 3, 32, 32)},
     "images=2, runs=1"),
    (lambda t, n: {"input_ids": torch.tensor([[1, 2, 3]]), "pixel_values": torch.zeros(1, 3, 32, 32)},
     "no occurrence of image_token_id 512 in input_ids"),
    (lambda t, n: {"input_ids": torch.tensor([[1] + [t] * n])}, "Found image token\\(s\\) 512 in input_ids but"),
    (lambda t, n: {"input_ids": torch.tensor([[1, 2], [3, 4]])}, r"batch size 1 when 2D .* \[2, 2\]"),
    (lambda t, n: {"input_ids": [1, 2]}, "'input_ids' must be a torch.Tensor, got list"),
    (lambda t, n: {"pixel_values": torch.zeros(1, 3, 32, 32)}, "must contain 'input_ids'"),
    (lambda t, n: "The quick", "a BatchFeature .* or a list of MultimodalInput, got str"),
])
def test_bad_processor_outputs(llava, features, message):
    runner = MultimodalRunner(llava.pte, llava.tokenizer)
    with pytest.raises(InvalidArgument, match=message):
        runner.generate_hf(features(llava.media_token_id, llava.media_tokens), CONFIG)
    assert runner.pos == 0
