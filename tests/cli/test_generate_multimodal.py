"""`pterun generate --image` and `--audio` on the multimodal test programs: the text ExecuTorch's MultimodalRunner
generates from the same pixels and features, and mistakes in one error line."""

from __future__ import annotations

import wave

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from pterun.cli.main import app
from tests.support.multimodal_programs import IMAGE_SIZE, audio_processor, multimodal_program

runner = CliRunner()
ARGS = ["--max-new-tokens", "10", "--temperature", "0", "--no-echo", "--json"]


@pytest.fixture(scope="module")
def llava():
    return multimodal_program("llava")


@pytest.fixture(scope="module")
def voxtral():
    return multimodal_program("voxtral")


def _executorch_text(program, inputs) -> str:
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401 - the llama:: kernels
    from executorch.extension.llm import runner as et

    theirs = et.MultimodalRunner(str(program.pte), str(program.tokenizer))
    return theirs.generate_text(inputs, et.GenerationConfig(temperature=0.0, max_new_tokens=10, echo=False))


def _generated(result) -> str:
    assert result.exit_code == 0, result.output
    return result.stderr.removesuffix("\n")  # with --json the text goes to stderr, the Stats to stdout


def test_an_image_gives_executorchs_text(llava, tmp_path):
    from executorch.extension.llm import runner as et
    from PIL import Image

    pixels = np.random.default_rng(0).integers(0, 256, (IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(tmp_path / "cat.png")  # the encoder's size: no resize
    result = runner.invoke(app, ["generate", str(llava.pte), "-t", str(llava.tokenizer), "--image",
                                 str(tmp_path / "cat.png"), "--prompt", "The <image> is", *ARGS])
    image = (torch.from_numpy(pixels).permute(2, 0, 1).float() / 255).contiguous()  # ExecuTorch wants (C, H, W) memory
    expected = _executorch_text(llava, [et.make_text_input("The "), et.make_image_input(image),
                                        et.make_text_input(" is")])
    assert _generated(result) == expected and expected


def test_an_image_first_without_a_mark_and_resized(llava, tmp_path):
    from PIL import Image

    pixels = np.random.default_rng(1).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(tmp_path / "wide.png")
    result = runner.invoke(app, ["generate", str(llava.pte), "-t", str(llava.tokenizer), "--image",
                                 str(tmp_path / "wide.png"), "--prompt", " it is", *ARGS])
    from pterun.llm import GenerationConfig, MultimodalRunner, make_image_input, make_text_input

    resized = Image.fromarray(pixels).resize((IMAGE_SIZE, IMAGE_SIZE), Image.Resampling.BICUBIC)
    ours = MultimodalRunner(llava.pte, llava.tokenizer)
    expected = ours.generate_text([make_image_input(np.asarray(resized).astype(np.float32) / 255),
                                   make_text_input(" it is")],
                                  GenerationConfig(temperature=0.0, max_new_tokens=10, echo=False))
    assert _generated(result) == expected and expected


def _wav(path, samples: np.ndarray, rate: int = 16_000, width: int = 2) -> None:
    with wave.open(str(path), "wb") as clip:
        clip.setnchannels(1), clip.setsampwidth(width), clip.setframerate(rate)
        clip.writeframes(samples.astype(f"<i{width}").tobytes())


def test_a_wav_through_executorchs_audio_processor_gives_executorchs_text(voxtral, tmp_path):
    from executorch.extension.llm import runner as et
    from executorch.runtime import Runtime

    samples = (np.sin(np.arange(20_000) * 0.05) * 12_000).astype(np.int16)
    _wav(tmp_path / "clip.wav", samples)
    processor = audio_processor()
    result = runner.invoke(app, ["generate", str(voxtral.pte), "-t", str(voxtral.tokenizer), "--audio",
                                 str(tmp_path / "clip.wav"), "--audio-processor", str(processor), "--prompt",
                                 "The <audio> says", *ARGS])
    waveform = torch.from_numpy(samples.astype(np.float32) / 32768)  # int16 by its full scale, as pterun.asr reads it
    features = Runtime.get().load_program(processor).load_method("forward").execute([waveform])[0]
    assert features.shape[0] == 2, "premise: 1.25 s is two chunks of features"
    expected = _executorch_text(voxtral, [et.make_text_input("The "), et.make_audio_input(features),
                                          et.make_text_input(" says")])
    assert _generated(result) == expected and expected


def test_a_wav_at_another_rate_is_resampled(voxtral, tmp_path):
    from pterun.asr import load_wav

    _wav(tmp_path / "fast.wav", (np.sin(np.arange(44_100) * 0.05) * 9_000).astype(np.int16), rate=44_100)
    processor = audio_processor()
    result = runner.invoke(app, ["generate", str(voxtral.pte), "-t", str(voxtral.tokenizer), "--audio",
                                 str(tmp_path / "fast.wav"), "--audio-processor", str(processor), *ARGS])
    from executorch.extension.llm import runner as et
    from executorch.runtime import Runtime

    features = Runtime.get().load_program(processor).load_method("forward").execute(
        [torch.from_numpy(load_wav(tmp_path / "fast.wav"))])[0]
    assert _generated(result) == _executorch_text(voxtral, [et.make_audio_input(features),
                                                            et.make_text_input("Once upon a time")])


def test_features_from_a_tensor_file(voxtral, tmp_path):
    features = torch.randn(1, 16, 100, generator=torch.Generator().manual_seed(0))
    torch.save(features, tmp_path / "features.pt")
    result = runner.invoke(app, ["generate", str(voxtral.pte), "-t", str(voxtral.tokenizer), "--audio",
                                 str(tmp_path / "features.pt"), "--prompt", " hello", *ARGS])
    from executorch.extension.llm import runner as et

    assert _generated(result) == _executorch_text(voxtral, [et.make_audio_input(features),
                                                            et.make_text_input(" hello")])


def _one_error(result, *parts: str) -> None:
    assert result.exit_code == 1, result.output
    assert result.output.count("error:") == 1 and "Traceback" not in result.output, result.output
    for part in parts:
        assert part in result.output, (part, result.output)


def test_mistakes_are_one_error_line(llava, voxtral, tmp_path):
    def generate(program, *args: str):
        return runner.invoke(app, ["generate", str(program.pte), "-t", str(program.tokenizer), *args, *ARGS])

    from PIL import Image

    Image.fromarray(np.zeros((8, 8, 3), dtype=np.uint8)).save(tmp_path / "a.png")
    image = str(tmp_path / "a.png")
    _one_error(generate(llava, "--image", str(tmp_path / "nope.jpg")), "no such file")
    _one_error(generate(llava, "--image", str(llava.tokenizer)), "not an image Pillow reads")
    _one_error(generate(llava, "--image", image, "--prompt", "<image> and <image>"), "2 <image> mark(s) for 1")
    _one_error(generate(voxtral, "--image", image), "no vision_encoder method")
    _one_error(generate(llava, "--audio", str(tmp_path / "a.wav")), "no audio_encoder method")
    _wav(tmp_path / "ok.wav", np.zeros(100))
    _one_error(generate(voxtral, "--audio", str(tmp_path / "ok.wav")), "needs --audio-processor")
    processor = str(audio_processor())
    (tmp_path / "bad.wav").write_bytes(b"RIFF not really")
    _one_error(generate(voxtral, "--audio", str(tmp_path / "bad.wav"), "--audio-processor", processor),
               "--audio", "bad.wav", "not a WAV file")
    _one_error(generate(voxtral, "--audio", str(tmp_path / "none.wav"), "--audio-processor", processor),
               "none.wav", "cannot read the audio file")
    text = runner.invoke(app, ["generate", str(multimodal_program("llava").pte.parent.parent / "nope"), "-t",
                               str(llava.tokenizer)])
    assert text.exit_code == 1 and text.output.count("error:") == 1


def test_a_text_model_refuses_media(tmp_path):
    from pterun.cli.options import example_llm

    program, tokenizer = example_llm()
    result = runner.invoke(app, ["generate", str(program), "-t", str(tokenizer), "--image", str(tmp_path / "a.png")])
    _one_error(result, "is a text model", "--image and --audio need a multimodal program")


def test_a_uint8_encoder_of_dynamic_size_gets_pixels_within_its_bounds(tmp_path):
    """ExecuTorch's LLaVA example takes uint8 (3, H, W) images up to its crop size: the image is resized to fit,
    keeping its aspect, as its runner resizes the longest edge."""
    from executorch.extension.llm import runner as et
    from PIL import Image

    program = multimodal_program("llava-executorch")
    pixels = np.random.default_rng(2).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(tmp_path / "wide.png")
    result = runner.invoke(app, ["generate", str(program.pte), "-t", str(program.tokenizer), "--image",
                                 str(tmp_path / "wide.png"), "--prompt", "<image> it is", *ARGS])
    resized = np.array(Image.fromarray(pixels).resize((IMAGE_SIZE, IMAGE_SIZE * 48 // 64),
                                                        Image.Resampling.BICUBIC))
    image = torch.from_numpy(resized).permute(2, 0, 1).contiguous()
    assert image.shape == (3, 24, 32), "premise: the longest edge at the bound"
    expected = _executorch_text(program, [et.make_image_input(image), et.make_text_input(" it is")])
    assert _generated(result) == expected and expected
