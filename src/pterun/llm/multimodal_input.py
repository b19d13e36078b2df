"""The inputs of multimodal generation, as ExecuTorch's runner binding defines them (multimodal_input.h, image.h,
audio.h, pybindings.cpp): text, token ids, an image, preprocessed audio, raw audio, and the ``make_*`` helpers.

The data is kept as one torch tensor (an image as (C, H, W), audio as (batch, n_bins, n_frames)); the list
properties ExecuTorch's classes have (``uint8_data``, ``float_data``, ``data``) are made from it when asked.

Beyond ExecuTorch's ``make_image_input``: a plain (H, W, C) array, as Pillow and NumPy give an image, is taken
(ExecuTorch takes a 3-D tensor for (C, H, W) unless its memory is channels-last, and refuses (480, 640, 3) with
"Image must have 3 (RGB) or 4 (RGBA) channels"); the layout is read from the shape, not the strides, so a
permuted view or an (N, C, H, W) tensor in channels-last memory is an image too; NumPy arrays and Pillow images
are taken besides tensors. A 3-D shape whose first dimension is 3 or 4 is (C, H, W), as ExecuTorch reads it;
otherwise one whose last is 3 or 4 is (H, W, C).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

import numpy as np
import torch

from pterun.errors import InvalidArgument, InvalidArgumentType

_CHANNELS = (3, 4)
_IMAGE_DTYPES = (torch.uint8, torch.float32)


def _as_tensor(value: Any, what: str) -> torch.Tensor:
    """A tensor, NumPy array or Pillow image as a tensor."""
    if isinstance(value, torch.Tensor):
        return value.detach()
    if hasattr(value, "getbands") and hasattr(value, "mode"):  # a Pillow image: (H, W) or (H, W, C) uint8
        value = np.asarray(value)
    if isinstance(value, np.ndarray):
        array = np.ascontiguousarray(value)
        return torch.from_numpy(array if array.flags.writeable else array.copy())
    raise InvalidArgumentType(f"{what} must be a torch.Tensor, a NumPy array or a Pillow image, got "
                              f"{type(value).__name__}")


def _flat(data: Any, what: str) -> torch.Tensor:
    """The data of ExecuTorch's list constructors: ints in [0, 255] are uint8, anything else float32 (pybind
    tries the uint8 overload first, then the float one)."""
    if isinstance(data, torch.Tensor | np.ndarray):
        tensor = _as_tensor(data, what).reshape(-1)
        return tensor if tensor.dtype == torch.uint8 else tensor.to(torch.float32)
    values = list(data)
    if all(isinstance(v, int | np.integer) and not isinstance(v, bool) and 0 <= v <= 255 for v in values):
        return torch.tensor(values, dtype=torch.uint8)
    try:
        return torch.tensor([float(v) for v in values], dtype=torch.float32)
    except (TypeError, ValueError):
        raise InvalidArgumentType(f"{what} data must be numbers (uint8 or float)") from None


def _check_size(data: torch.Tensor, sizes: dict[str, int], what: str) -> None:
    expected = 1
    for value in sizes.values():
        expected *= value
    if data.numel() != expected:
        spelled = " * ".join(f"{name} {value}" for name, value in sizes.items())
        raise InvalidArgument(f"{what} data has {data.numel()} values; expected {spelled} = {expected}")


_H = TypeVar("_H", bound="_Held")


class _Held:
    """A (3-d) uint8 or float32 tensor an input holds, and the accessors ExecuTorch's Image and Audio share."""

    __slots__ = ("_tensor",)
    _tensor: torch.Tensor
    _noun = ""

    @classmethod
    def from_tensor(cls: type[_H], tensor: torch.Tensor) -> _H:
        """An input of a tensor laid out as the class's is (copied, as ExecuTorch copies it)."""
        held = cls.__new__(cls)
        held._tensor = tensor.clone(memory_format=torch.contiguous_format)
        return held

    def is_uint8(self) -> bool:
        return self._tensor.dtype == torch.uint8

    def is_float(self) -> bool:
        return self._tensor.dtype == torch.float32

    @property
    def uint8_data(self) -> list[int]:
        if not self.is_uint8():
            raise InvalidArgumentType(f"the {self._noun} holds float data, not uint8")
        return self._tensor.reshape(-1).tolist()

    @property
    def float_data(self) -> list[float]:
        if not self.is_float():
            raise InvalidArgumentType(f"the {self._noun} holds uint8 data, not float")
        return self._tensor.reshape(-1).tolist()

    def _dtype(self) -> str:
        return "uint8" if self.is_uint8() else "float32"


class Image(_Held):
    """An image as (C, H, W), uint8 or float32: ``Image(data, width, height, channels)`` as ExecuTorch's."""

    __slots__ = ()
    _noun = "image"

    def __init__(self, data: Any = (), width: int = 0, height: int = 0, channels: int = 0) -> None:
        flat = _flat(data, "Image")
        _check_size(flat, {"channels": channels, "height": height, "width": width}, "Image")
        self._tensor = flat.reshape(int(channels), int(height), int(width))

    @property
    def tensor(self) -> torch.Tensor:
        """The pixels as a (C, H, W) tensor."""
        return self._tensor

    @property
    def channels(self) -> int:
        return self._tensor.shape[0]

    @property
    def height(self) -> int:
        return self._tensor.shape[1]

    @property
    def width(self) -> int:
        return self._tensor.shape[2]

    def __repr__(self) -> str:
        return f"<Image height={self.height} width={self.width} channels={self.channels} dtype={self._dtype()}>"


class Audio(_Held):
    """Preprocessed audio (features) as (batch_size, n_bins, n_frames), uint8 or float32, as ExecuTorch's."""

    __slots__ = ()
    _noun = "audio"

    def __init__(self, data: Any = (), batch_size: int = 0, n_bins: int = 0, n_frames: int = 0) -> None:
        flat = _flat(data, "Audio")
        _check_size(flat, {"batch_size": batch_size, "n_bins": n_bins, "n_frames": n_frames}, "Audio")
        self._tensor = flat.reshape(int(batch_size), int(n_bins), int(n_frames))

    @property
    def tensor(self) -> torch.Tensor:
        """The features as a (batch_size, n_bins, n_frames) tensor."""
        return self._tensor

    @property
    def batch_size(self) -> int:
        return self._tensor.shape[0]

    @property
    def n_bins(self) -> int:
        return self._tensor.shape[1]

    @property
    def n_frames(self) -> int:
        return self._tensor.shape[2]

    def __repr__(self) -> str:
        return (f"<Audio batch_size={self.batch_size} n_bins={self.n_bins} n_frames={self.n_frames} "
                f"dtype={self._dtype()}>")


class RawAudio:
    """Raw audio bytes as ExecuTorch's ``RawAudio`` (fields readable and writable)."""

    __slots__ = ("data", "batch_size", "n_channels", "n_samples")

    def __init__(self, data: Sequence[int] = (), batch_size: int = 0, n_channels: int = 0, n_samples: int = 0):
        self.data = list(data)
        self.batch_size = int(batch_size)
        self.n_channels = int(n_channels)
        self.n_samples = int(n_samples)

    def __repr__(self) -> str:
        return f"<RawAudio batch_size={self.batch_size} n_channels={self.n_channels} n_samples={self.n_samples}>"


_KINDS = ("text", "tokens", "image", "audio", "raw_audio")


class MultimodalInput:
    """One input of a multimodal generation: ``MultimodalInput(text)``, ``(tokens)``, ``(image)``, ``(audio)`` or
    ``(raw_audio)``, or by keyword (``MultimodalInput(tokens=[1, 2])``)."""

    __slots__ = ("_kind", "_value")

    def __init__(self, value: Any = None, **keyword: Any) -> None:
        if keyword:
            if value is not None or len(keyword) != 1 or next(iter(keyword)) not in _KINDS:
                raise InvalidArgumentType(f"MultimodalInput takes one of {', '.join(_KINDS)}; got "
                                          f"{', '.join(keyword) or 'none'}")
            kind, value = next(iter(keyword.items()))
        else:
            kind = _kind_of(value)
        if kind == "tokens":
            value = _tokens(value)
        elif kind == "text" and not isinstance(value, str):
            raise InvalidArgumentType(f"text must be a str, got {type(value).__name__}")
        elif kind in ("image", "audio", "raw_audio") and not isinstance(value, _CLASSES[kind]):
            raise InvalidArgumentType(f"{kind} must be a {_CLASSES[kind].__name__}, got {type(value).__name__}")
        self._kind = kind
        self._value: Any = value

    @property
    def kind(self) -> str:
        """"text", "tokens", "image", "audio" or "raw_audio" (ExecuTorch's type names)."""
        return self._kind

    @property
    def value(self):
        return self._value

    def is_text(self) -> bool:
        return self._kind == "text"

    def is_tokens(self) -> bool:
        return self._kind == "tokens"

    def is_image(self) -> bool:
        return self._kind == "image"

    def is_audio(self) -> bool:
        return self._kind == "audio"

    def is_raw_audio(self) -> bool:
        return self._kind == "raw_audio"

    def get_text(self) -> str | None:
        return self._value if self._kind == "text" else None

    def get_tokens(self) -> list[int] | None:
        return list(self._value) if self._kind == "tokens" else None

    def get_image(self) -> Image | None:
        return self._value if self._kind == "image" else None

    def get_audio(self) -> Audio | None:
        return self._value if self._kind == "audio" else None

    def get_raw_audio(self) -> RawAudio | None:
        return self._value if self._kind == "raw_audio" else None

    def __repr__(self) -> str:
        if self._kind == "text":
            text = self._value
            return f'<MultimodalInput type=text content="{text[:50]}{"..." if len(text) > 50 else ""}">'
        return f"<MultimodalInput type={self._kind}>"


_CLASSES = {"image": Image, "audio": Audio, "raw_audio": RawAudio}


def _kind_of(value: Any) -> str:
    if isinstance(value, str):
        return "text"
    for kind, cls in _CLASSES.items():
        if isinstance(value, cls):
            return kind
    if isinstance(value, Sequence | np.ndarray | torch.Tensor):
        return "tokens"
    raise InvalidArgumentType(f"MultimodalInput takes text, tokens, an Image, an Audio or a RawAudio; got "
                              f"{type(value).__name__}")


def _tokens(values: Any) -> tuple[int, ...]:
    if isinstance(values, torch.Tensor | np.ndarray):
        values = values.reshape(-1).tolist()
    tokens = []
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < 0:
            raise InvalidArgumentType(f"tokens must be non-negative ints, found {v!r}")
        tokens.append(int(v))
    return tuple(tokens)


def make_text_input(text: str) -> MultimodalInput:
    return MultimodalInput(text=text)


def make_token_input(tokens: Sequence[int]) -> MultimodalInput:
    return MultimodalInput(tokens=tokens)


def image_tensor(image: Any) -> torch.Tensor:
    """An image's pixels as (C, H, W): from (C, H, W), (1, C, H, W) or (H, W, C), uint8 or float32, any strides
    (the module's docstring says how the layout is told)."""
    tensor = _as_tensor(image, "image")
    if tensor.dim() == 4:
        if tensor.shape[0] != 1:
            raise InvalidArgument(f"Batch size for 4D image tensor must be 1; the image is {list(tensor.shape)}")
        tensor = tensor[0]
    if tensor.dim() != 3:
        raise InvalidArgument(
            f"Image tensor must be 3-dimensional (C, H, W) or (H, W, C), or 4-dimensional (1, C, H, W); the image "
            f"is {list(tensor.shape)}"
        )
    if tensor.shape[0] not in _CHANNELS:
        if tensor.shape[2] not in _CHANNELS:
            raise InvalidArgument(f"Image must have 3 (RGB) or 4 (RGBA) channels, first as (C, H, W) or last as "
                                  f"(H, W, C); the image is {list(tensor.shape)}")
        tensor = tensor.permute(2, 0, 1)
    if tensor.dtype not in _IMAGE_DTYPES:
        raise InvalidArgument(f"Unsupported image tensor dtype {str(tensor.dtype).removeprefix('torch.')}. Only "
                              f"uint8 and float32 are supported.")
    return tensor


def make_image_input(image: Any) -> MultimodalInput:
    """An image input from a tensor, NumPy array or Pillow image: (C, H, W), (1, C, H, W) or (H, W, C); 3 or 4
    channels; uint8 or float32."""
    return MultimodalInput(image=Image.from_tensor(image_tensor(image)))


def make_audio_input(features: Any) -> MultimodalInput:
    """Preprocessed audio from a (batch_size, n_bins, n_frames) uint8 or float32 tensor (or NumPy array)."""
    tensor = _as_tensor(features, "audio")
    if tensor.dim() != 3:
        raise InvalidArgument(f"Audio tensor must be 3-dimensional (batch_size, n_bins, n_frames); the audio is "
                              f"{list(tensor.shape)}")
    if tensor.dtype not in _IMAGE_DTYPES:
        raise InvalidArgument(f"Unsupported audio tensor dtype {str(tensor.dtype).removeprefix('torch.')}. Only "
                              f"uint8 and float32 are supported for preprocessed audio.")
    return MultimodalInput(audio=Audio.from_tensor(tensor))


def make_raw_audio_input(samples: Any) -> MultimodalInput:
    """Raw audio from a (batch_size, n_channels, n_samples) uint8 tensor, as ExecuTorch's."""
    tensor = _as_tensor(samples, "raw audio")
    if tensor.dim() != 3:
        raise InvalidArgument(f"Raw audio tensor must be 3-dimensional (batch_size, n_channels, n_samples); the "
                              f"audio is {list(tensor.shape)}")
    if tensor.dtype != torch.uint8:
        raise InvalidArgument(f"Unsupported raw audio tensor dtype {str(tensor.dtype).removeprefix('torch.')}. "
                              f"Only uint8 is supported for raw audio.")
    batch, channels, samples_ = tensor.shape
    return MultimodalInput(raw_audio=RawAudio(tensor.reshape(-1).tolist(), batch, channels, samples_))
