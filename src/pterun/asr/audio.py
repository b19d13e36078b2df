"""Audio in: samples checked for what Whisper hears (mono float at 16 kHz), WAV files read, resampled.

WAV files are read with SciPy's ``scipy.io.wavfile`` and resampled with ``scipy.signal.resample_poly``
(the extra ``pterun[asr]``). The standard library's ``wave`` reads integer PCM only, and on Python 3.11 not
the WAVE_FORMAT_EXTENSIBLE header that recorders write for 24-bit or multichannel audio; SciPy reads those
and float WAVs too, and its polyphase resampler (a Kaiser-windowed FIR) is the well-kept routine for a
rational rate change such as 44.1 kHz to 16 kHz. Torchaudio would also do, but its releases are tied to one
torch release each.
"""

from __future__ import annotations

import math
import os

import numpy as np
import torch

from pterun.asr.features import SAMPLE_RATE
from pterun.errors import AccessFailed, InvalidArgument, InvalidArgumentType, NotSupported

_FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def waveform(audio, sample_rate: int, *, name: str = "audio") -> torch.Tensor:
    """``audio`` as Whisper's input: a 1-D float32 tensor of finite samples at 16 kHz (a NumPy array or a
    tensor, on any device; float64 and half precision are converted). Anything else is refused naming
    ``name``: integer PCM (divide by its full scale first), several channels, another rate."""
    if isinstance(audio, np.ndarray):
        if audio.dtype.kind not in "fiu":
            raise InvalidArgumentType(f"{name}: expected float samples, found a NumPy array of {audio.dtype}")
        audio = torch.from_numpy(np.ascontiguousarray(audio))
    if not isinstance(audio, torch.Tensor):
        raise InvalidArgumentType(f"{name}: expected a 1-D torch.Tensor or NumPy array of samples, "
                                  f"found {type(audio).__name__}")
    if isinstance(sample_rate, bool) or not isinstance(sample_rate, int):
        raise InvalidArgumentType(f"sample_rate: expected an int (Hz), found {type(sample_rate).__name__}")
    if sample_rate != SAMPLE_RATE:
        raise InvalidArgument(
            f"{name}: expected audio sampled at {SAMPLE_RATE} Hz, found {sample_rate} Hz; resample it first "
            f"(pterun.asr.resample)"
        )
    if audio.dtype not in _FLOATS:
        raise InvalidArgument(
            f"{name}: expected float samples in [-1, 1], found {audio.dtype}; integer PCM is divided by its "
            f"full scale first (32768 for int16)"
        )
    if audio.dim() != 1:
        raise InvalidArgument(
            f"{name}: expected mono samples [n], found shape {list(audio.shape)}; average the channels first"
        )
    if audio.numel() == 0:
        raise InvalidArgument(f"{name}: expected samples, found none")
    audio = audio.to(torch.float32)
    if not bool(torch.isfinite(audio).all()):
        raise InvalidArgument(f"{name}: expected finite samples, found NaN or infinity")
    return audio


def resample(samples: np.ndarray, rate: int, target: int = SAMPLE_RATE) -> np.ndarray:
    """``samples`` (float, ``[n]`` or ``[n, channels]``) from ``rate`` to ``target`` Hz, float32."""
    samples = np.asarray(samples, dtype=np.float32)
    if rate == target:
        return samples
    if rate <= 0 or target <= 0:
        raise InvalidArgument(f"sample rates must be positive, got {rate} Hz to {target} Hz")
    signal = _scipy("signal", "resample audio")
    divisor = math.gcd(rate, target)
    return signal.resample_poly(samples, target // divisor, rate // divisor, axis=0).astype(np.float32)


def load_wav(path: str | os.PathLike, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """A WAV file's samples as mono float32 in [-1, 1] at ``sample_rate``: integer PCM (8, 16, 24 or 32 bits)
    scaled by its full scale, channels averaged, other rates resampled."""
    wavfile = _scipy("io.wavfile", "read WAV files")
    path = os.fspath(path)
    try:
        rate, data = wavfile.read(path)
    except OSError as error:
        raise AccessFailed(f"{path}: cannot read the audio file: {error.strerror or error}") from None
    except ValueError as error:  # not a RIFF/WAVE file, or an encoding SciPy does not read
        raise InvalidArgument(f"{path}: not a WAV file of PCM or float samples: {error}") from None
    if data.dtype.kind == "u":  # 8-bit WAV is unsigned, centred on 128
        samples = (data.astype(np.float32) - 128.0) / 128.0
    elif data.dtype.kind == "i":  # 24-bit samples arrive in the top bytes of int32
        samples = data.astype(np.float32) / float(-np.iinfo(data.dtype).min)
    else:
        samples = data.astype(np.float32)
    if samples.ndim == 2:
        samples = samples.mean(axis=1)
    if samples.size == 0:
        raise InvalidArgument(f"{path}: the WAV file holds no samples")
    return resample(samples, int(rate), sample_rate)


def _scipy(module: str, what: str):
    import importlib

    try:
        return importlib.import_module(f"scipy.{module}")
    except ImportError:
        raise NotSupported(f"pterun.asr needs SciPy to {what} (pip install pterun[asr])") from None
