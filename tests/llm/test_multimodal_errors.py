"""Wrong inputs to MultimodalRunner: typed errors with ExecuTorch's codes, naming the input, raised before any
input reaches the KV cache, and the runner generating as before afterwards."""

from __future__ import annotations

import pytest
import torch

from pterun.errors import ErrorCode, InvalidArgument, InvalidProgram, NotSupported, PteError
from pterun.llm import (
    GenerationConfig,
    MultimodalInput,
    MultimodalRunner,
    make_audio_input,
    make_image_input,
    make_raw_audio_input,
    make_text_input,
)
from tests.support.multimodal_programs import IMAGE_SIZE, MAX_LENGTH, MEL_BINS, media

CONFIG = GenerationConfig(temperature=0.0, max_new_tokens=8, echo=False)


def _good(program) -> list:
    maker = make_image_input if program.modality == "vision" else make_audio_input
    return [make_text_input("The quick"), maker(media(program, 0, chunks=1)), make_text_input(" brown fox")]


def _generated(runner, inputs) -> list[str]:
    pieces: list[str] = []
    runner.generate(inputs, CONFIG, pieces.append)
    return pieces


def _refused(runner, program, inputs, error: type[PteError], message: str) -> PteError:
    """``inputs`` raise ``error`` matching ``message``; the runner is left where it was and still generates
    what a fresh runner does."""
    before = runner.pos
    with pytest.raises(error, match=message) as caught:
        runner.generate(inputs, CONFIG)
    assert runner.pos == before
    runner.reset()
    assert _generated(runner, _good(program)) == _generated(MultimodalRunner(program.pte, program.tokenizer),
                                                           _good(program))
    runner.reset()
    return caught.value


def test_an_image_for_a_program_without_a_vision_encoder(voxtral):
    runner = MultimodalRunner(voxtral.pte, voxtral.tokenizer)
    assert "vision_encoder" not in runner.program.method_names  # premise
    error = _refused(runner, voxtral, [make_text_input("a"), make_image_input(torch.zeros(3, 8, 8))], InvalidArgument,
                     r"input 1 \(image\): the program has no vision_encoder method .*audio_encoder")
    assert error.code == ErrorCode.InvalidArgument


def test_audio_for_a_program_without_an_audio_encoder(llava):
    runner = MultimodalRunner(llava.pte, llava.tokenizer)
    _refused(runner, llava, [make_audio_input(torch.zeros(1, MEL_BINS, 100))], InvalidArgument,
             r"input 0 \(audio\): the program has no audio_encoder method")


def test_an_image_of_the_wrong_type_or_size(llava):
    runner = MultimodalRunner(llava.pte, llava.tokenizer)
    uint8 = torch.zeros(3, IMAGE_SIZE, IMAGE_SIZE, dtype=torch.uint8)
    _refused(runner, llava, [make_text_input("a"), make_image_input(uint8)], InvalidArgument,
             r"input 1 \(image\): Model expects float image data, but image has uint8_t data \(vision_encoder "
             r"takes \[1, 3, 32, 32\] of float32\)")
    _refused(runner, llava, [make_image_input(torch.zeros(3, 16, 16))], InvalidArgument,
             r"input 0 \(image\): vision_encoder takes \[1, 3, 32, 32\] of float32; the image is \[1, 3, 16, 16\]")


def test_images_for_an_encoder_of_uint8_pixels(llava_example):
    runner = MultimodalRunner(llava_example.pte, llava_example.tokenizer)
    _refused(runner, llava_example, [make_image_input(torch.rand(3, 28, 32))], InvalidArgument,
             r"input 0 \(image\): Model expects uint8_t image data, but image has float data \(vision_encoder takes "
             r"\[3, 32, 32\] of uint8\)")
    _refused(runner, llava_example, [make_text_input("a"), make_image_input(torch.zeros(3, 40, 32, dtype=torch.uint8))],
             PteError, r"input 1 \(image\): .*vision_encoder")


def test_audio_of_the_wrong_type_or_shape(voxtral):
    runner = MultimodalRunner(voxtral.pte, voxtral.tokenizer)
    error = _refused(runner, voxtral, [make_audio_input(torch.zeros(1, MEL_BINS, 100, dtype=torch.uint8))],
                     NotSupported, r"input 0 \(audio\): Unsupported audio encoder input dtype: uint8. Expecting "
                                   r"float32")
    assert error.code == ErrorCode.NotSupported
    _refused(runner, voxtral, [make_text_input("a"), make_audio_input(torch.zeros(1, MEL_BINS + 1, 100))],
             PteError, r"input 1 \(audio\): .*audio_encoder.*\[1, 17, 100\]")


def test_more_positions_than_the_context(voxtral, llava):
    runner = MultimodalRunner(voxtral.pte, voxtral.tokenizer)
    chunks = MAX_LENGTH // voxtral.media_tokens + 1
    _refused(runner, voxtral, [make_text_input("The"), make_audio_input(media(voxtral, chunks=chunks))],
             InvalidArgument, rf"input 1 \(audio\): fills {chunks * voxtral.media_tokens} positions from position 1: "
                              rf"pos \+ positions >= max_context_len {MAX_LENGTH}")
    # Images that fit one by one but not together: the first one to overflow is named, nothing is prefilled.
    runner = MultimodalRunner(llava.pte, llava.tokenizer)
    images = [make_image_input(media(llava, seed)) for seed in range(MAX_LENGTH // llava.media_tokens)]
    _refused(runner, llava, images, InvalidArgument,
             rf"input {len(images) - 1} \(image\): fills 16 positions from position {MAX_LENGTH - llava.media_tokens}")


def test_a_full_context_after_turns_is_refused_and_reset_starts_over(llava):
    runner = MultimodalRunner(llava.pte, llava.tokenizer)
    runner.prefill([make_image_input(media(llava, seed)) for seed in range(3)])
    runner.generate([make_text_input(" the")], CONFIG)
    before = runner.pos
    assert before + llava.media_tokens >= MAX_LENGTH  # premise: the turns left no room for another image
    with pytest.raises(InvalidArgument, match=rf"input 0 \(image\): fills 16 positions from position {before}"):
        runner.generate([make_image_input(media(llava, 3))], CONFIG)
    assert runner.pos == before
    runner.reset()
    assert _generated(runner, _good(llava))  # and starts over


def test_raw_audio_and_misuse(voxtral):
    runner = MultimodalRunner(voxtral.pte, voxtral.tokenizer)
    _refused(runner, voxtral, [make_raw_audio_input(torch.zeros(1, 1, 8, dtype=torch.uint8))], NotSupported,
             r"input 0 \(raw_audio\): raw audio goes to no method")
    _refused(runner, voxtral, [], InvalidArgument, "MultimodalInput vector cannot be empty")
    _refused(runner, voxtral, "The quick", InvalidArgument, "inputs must be a list of MultimodalInput, got str")
    _refused(runner, voxtral, [make_text_input("a"), "b"], InvalidArgument, "input 1 is a str")
    with pytest.raises(InvalidArgument, match=r"Temperature must be in \[0, 1\]"):
        runner.generate(_good(voxtral), GenerationConfig(temperature=1.5))
    assert runner.pos == 0


def test_a_text_program_is_not_multimodal(dynamic_llama, tokenizer_path):
    with pytest.raises(InvalidProgram, match=r"Missing required methods \(token_embedding, text_decoder\).*forward"):
        MultimodalRunner(dynamic_llama, tokenizer_path)


def test_generate_from_a_prefill_goes_on_without_inputs(llava):
    """Beyond ExecuTorch's (which refuses an empty list): generate([]) starts from what prefill left."""
    runner = MultimodalRunner(llava.pte, llava.tokenizer)
    runner.prefill(_good(llava))
    from_prefill = _generated(runner, [])
    runner.reset()
    assert from_prefill == _generated(runner, _good(llava))
    with pytest.raises(InvalidArgument, match="cannot be empty"):
        runner.generate([MultimodalInput("x")][:0], CONFIG)
