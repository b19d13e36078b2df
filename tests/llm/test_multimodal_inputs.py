"""The multimodal inputs and their make_* helpers: what ExecuTorch's accept, the same; beyond it, the layouts
pterun reads from the shape; every refusal a typed error saying what it found."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from pterun.errors import InvalidArgument, InvalidArgumentType, PteError
from pterun.llm import (
    Audio,
    Image,
    MultimodalInput,
    RawAudio,
    make_audio_input,
    make_image_input,
    make_raw_audio_input,
    make_text_input,
    make_token_input,
)

CHW = torch.arange(3 * 6 * 5, dtype=torch.uint8).reshape(3, 6, 5)


@pytest.mark.parametrize("layout", [
    CHW, CHW[None], CHW.permute(1, 2, 0).contiguous(), CHW.permute(1, 2, 0), CHW.permute(1, 2, 0).numpy(),
    CHW[None].contiguous(memory_format=torch.channels_last), CHW.permute(1, 2, 0).contiguous()[None],
], ids=["chw", "nchw", "hwc", "hwc-view", "hwc-numpy", "nchw-channels-last", "nhwc"])
def test_every_layout_gives_the_same_pixels(layout):
    image = make_image_input(layout).get_image()
    assert (image.channels, image.height, image.width) == (3, 6, 5)
    assert torch.equal(image.tensor, CHW) and image.uint8_data == CHW.reshape(-1).tolist()


def test_a_pillow_image_is_an_image():
    pil = pytest.importorskip("PIL.Image")
    rgb = np.random.default_rng(0).integers(0, 256, (6, 7, 3), dtype=np.uint8)
    image = make_image_input(pil.fromarray(rgb)).get_image()
    assert torch.equal(image.tensor, torch.from_numpy(rgb).permute(2, 0, 1))


def test_the_executorch_reading_of_an_ambiguous_shape():
    """(4, 5, 3): four channels first, as ExecuTorch reads a 3-D tensor whose first dimension is 3 or 4."""
    image = make_image_input(torch.zeros(4, 5, 3, dtype=torch.uint8)).get_image()
    assert (image.channels, image.height, image.width) == (4, 5, 3)


def test_float_images_stay_float():
    image = make_image_input(CHW.float() / 255).get_image()
    assert image.is_float() and not image.is_uint8() and image.float_data[1] == pytest.approx(1 / 255)
    with pytest.raises(InvalidArgumentType, match="float data, not uint8"):
        image.uint8_data  # noqa: B018


@pytest.mark.parametrize("bad, message", [
    (torch.ones(100, dtype=torch.uint8), r"3-dimensional .* the image is \[100\]"),
    (torch.ones(2, 100, 100, dtype=torch.uint8), r"3 \(RGB\) or 4 \(RGBA\) channels.* \[2, 100, 100\]"),
    (torch.ones(2, 3, 4, 4, dtype=torch.uint8), r"Batch size for 4D image tensor must be 1.* \[2, 3, 4, 4\]"),
    (torch.ones(3, 4, 4, dtype=torch.float64), r"dtype float64\. Only uint8 and float32"),
    (torch.ones(3, 4, 4, dtype=torch.int32), r"dtype int32\. Only uint8 and float32"),
])
def test_bad_images_are_refused(bad, message):
    with pytest.raises(InvalidArgument, match=message) as caught:
        make_image_input(bad)
    assert caught.value.code == 0x12


def test_not_an_image_at_all():
    with pytest.raises(InvalidArgumentType, match="must be a torch.Tensor, a NumPy array or a Pillow image, got list"):
        make_image_input([[1, 2, 3]])


def test_audio_and_raw_audio_as_executorch():
    audio = make_audio_input(torch.zeros(1, 2, 3)).get_audio()
    assert (audio.batch_size, audio.n_bins, audio.n_frames) == (1, 2, 3) and audio.is_float()
    assert repr(audio) == "<Audio batch_size=1 n_bins=2 n_frames=3 dtype=float32>"
    assert make_audio_input(torch.zeros(1, 2, 3, dtype=torch.uint8)).get_audio().is_uint8()
    raw = make_raw_audio_input(torch.arange(6, dtype=torch.uint8).reshape(1, 2, 3))
    assert raw.is_raw_audio() and raw.get_raw_audio().data == [0, 1, 2, 3, 4, 5]
    assert repr(raw.get_raw_audio()) == "<RawAudio batch_size=1 n_channels=2 n_samples=3>"
    with pytest.raises(InvalidArgument, match=r"3-dimensional \(batch_size, n_bins, n_frames\).*\[2, 3\]"):
        make_audio_input(torch.zeros(2, 3))
    with pytest.raises(InvalidArgument, match="dtype float64. Only uint8 and float32"):
        make_audio_input(torch.zeros(1, 2, 3, dtype=torch.float64))
    with pytest.raises(InvalidArgument, match="dtype float32. Only uint8 is supported for raw audio"):
        make_raw_audio_input(torch.zeros(1, 2, 3))


def test_the_list_constructors_as_executorch():
    """ints in [0, 255] are uint8 data, anything else float (pybind's overload order); the size is checked."""
    assert Image([1, 2, 3, 4], 2, 2, 1).uint8_data == [1, 2, 3, 4]
    assert Image([300, 2, 3], 1, 1, 3).is_float() and Image([1.5, 2, 3], 1, 1, 3).is_float()
    assert repr(Image([0] * (4 * 6 * 3), 6, 4, 3)) == "<Image height=4 width=6 channels=3 dtype=uint8>"
    assert Audio([1, 2, 3, 4, 5, 6], 1, 2, 3).uint8_data == [1, 2, 3, 4, 5, 6]
    with pytest.raises(InvalidArgument, match=r"Image data has 2 values; expected channels 3 \* height 1 \* width 1"):
        Image([1, 2], 1, 1, 3)
    with pytest.raises(InvalidArgument, match="Audio data has 5 values"):
        Audio([1, 2, 3, 4, 5], 1, 2, 3)
    raw = RawAudio([1, 2], 1, 1, 2)
    raw.n_samples = 3
    assert raw.n_samples == 3


def test_multimodal_input_kinds_and_reprs():
    text, tokens = MultimodalInput("Hello, world!"), MultimodalInput([1, 2, 3])
    assert text.is_text() and text.get_text() == "Hello, world!" and text.get_tokens() is None
    assert tokens.is_tokens() and tokens.get_tokens() == [1, 2, 3] and tokens.get_text() is None
    assert make_token_input(np.array([4, 5])).get_tokens() == [4, 5]
    assert MultimodalInput(tokens=torch.tensor([[6, 7]])).get_tokens() == [6, 7]
    assert make_text_input("x" * 60).__repr__() == f'<MultimodalInput type=text content="{"x" * 50}...">'
    assert repr(MultimodalInput(Image([0, 0, 0], 1, 1, 3))) == "<MultimodalInput type=image>"
    assert repr(tokens) == "<MultimodalInput type=tokens>"


@pytest.mark.parametrize("call, message", [
    (lambda: MultimodalInput(3.5), "takes text, tokens, an Image, an Audio or a RawAudio; got float"),
    (lambda: MultimodalInput([1, -2]), r"tokens must be non-negative ints, found -2"),
    (lambda: MultimodalInput([1, 2.5]), r"tokens must be non-negative ints, found 2.5"),
    (lambda: MultimodalInput(image="a.jpg"), "image must be a Image, got str"),
    (lambda: MultimodalInput(video=1), "takes one of text, tokens, image, audio, raw_audio; got video"),
])
def test_bad_multimodal_inputs(call, message):
    with pytest.raises(PteError, match=message) as caught:
        call()
    assert isinstance(caught.value, TypeError) and caught.value.code == 0x12
