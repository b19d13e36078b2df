"""Whisper's input features: the log-mel spectrogram of 30 s of 16 kHz audio, as transformers'
``WhisperFeatureExtractor`` computes it (its PyTorch path, the one it takes where torch is installed).

The audio is zero-padded or cut to the window, framed by ``torch.stft`` (a periodic Hann window of 400
samples every 160, centred, reflect-padded), its power spectrum (the last frame dropped, as Whisper does)
mapped onto ``n_mels`` mel bands, then ``log10``, floored 8 below the window's maximum and scaled to
``(x + 4) / 4``. The steps and their order are the extractor's, in float32, so that the features match it to
float rounding on every device.

The mel filter bank is Slaney's (librosa's default, which Whisper's ``mel_filters.npz`` was made with):
triangles over 0-8 kHz whose centres are evenly spaced on Slaney's mel scale (linear to 1 kHz, logarithmic
above), each divided by its width. It is a formula, written here rather than taken from torchaudio or
librosa, which pterun would otherwise need only for it; tests/asr compares it with transformers' own.
"""

from __future__ import annotations

import functools
import math

import torch

from pterun.errors import InvalidArgument

SAMPLE_RATE = 16000  # Hz: what every Whisper model hears
N_FFT = 400  # samples per frame (25 ms)
HOP_LENGTH = 160  # samples between frames (10 ms)
CHUNK_SECONDS = 30  # one window of audio
N_SAMPLES = CHUNK_SECONDS * SAMPLE_RATE  # 480,000 samples a window
N_FRAMES = N_SAMPLES // HOP_LENGTH  # 3,000 frames a window
MAX_FREQUENCY = 8000.0  # Hz: the top of the highest mel band (the Nyquist frequency of 16 kHz)

# Slaney's mel scale: 3 mels per 200 Hz up to 1 kHz (15 mels), then 27 mels per factor 6.4.
_LINEAR_HZ_PER_MEL = 200.0 / 3.0
_LOG_START_HZ = 1000.0
_LOG_START_MEL = _LOG_START_HZ / _LINEAR_HZ_PER_MEL
_MELS_PER_LOG_STEP = 27.0 / math.log(6.4)


def _hz_to_mel(hz: torch.Tensor) -> torch.Tensor:
    linear = hz / _LINEAR_HZ_PER_MEL
    logarithmic = _LOG_START_MEL + torch.log(hz / _LOG_START_HZ) * _MELS_PER_LOG_STEP
    return torch.where(hz >= _LOG_START_HZ, logarithmic, linear)


def _mel_to_hz(mel: torch.Tensor) -> torch.Tensor:
    linear = mel * _LINEAR_HZ_PER_MEL
    logarithmic = _LOG_START_HZ * torch.exp((mel - _LOG_START_MEL) / _MELS_PER_LOG_STEP)
    return torch.where(mel >= _LOG_START_MEL, logarithmic, linear)


@functools.lru_cache(maxsize=8)
def _filters(n_mels: int, device: torch.device) -> torch.Tensor:
    n_freqs = 1 + N_FFT // 2
    fft_hz = torch.linspace(0.0, SAMPLE_RATE // 2, n_freqs, dtype=torch.float64)
    edges_mel = torch.linspace(float(_hz_to_mel(torch.tensor(0.0, dtype=torch.float64))),
                               float(_hz_to_mel(torch.tensor(MAX_FREQUENCY, dtype=torch.float64))),
                               n_mels + 2, dtype=torch.float64)
    edges_hz = _mel_to_hz(edges_mel)
    widths = edges_hz.diff()
    slopes = edges_hz[None, :] - fft_hz[:, None]  # [n_freqs, n_mels + 2]
    rising = -slopes[:, :-2] / widths[:-1]
    falling = slopes[:, 2:] / widths[1:]
    triangles = torch.clamp(torch.minimum(rising, falling), min=0.0)
    # Slaney's normalization: each band's area is the same (2 / its width in Hz).
    bank = triangles * (2.0 / (edges_hz[2:] - edges_hz[:-2]))[None, :]
    return bank.T.to(device=device, dtype=torch.float32).contiguous()  # [n_mels, n_freqs]


def mel_filters(n_mels: int = 80, device: str | torch.device = "cpu") -> torch.Tensor:
    """Slaney's mel filter bank for Whisper's spectrogram, ``[n_mels, 201]`` in float32 (80 bands for most
    models, 128 for large-v3)."""
    if not isinstance(n_mels, int) or isinstance(n_mels, bool) or n_mels < 1:
        raise InvalidArgument(f"n_mels must be a positive int, got {n_mels!r}")
    return _filters(n_mels, torch.device(device))


def log_mel_spectrogram(audio: torch.Tensor, n_mels: int = 80, n_samples: int = N_SAMPLES) -> torch.Tensor:
    """Whisper's features of ``audio`` (float32 samples at 16 kHz, ``[n]`` or a batch ``[b, n]``), padded with
    zeros or cut to ``n_samples``: ``[n_mels, n_samples // 160]`` (``[b, n_mels, ...]`` for a batch), on the
    audio's device. Callers check the audio first (``pterun.asr.audio.waveform``)."""
    length = audio.shape[-1]
    if length < n_samples:
        audio = torch.nn.functional.pad(audio, (0, n_samples - length))
    elif length > n_samples:
        audio = audio[..., :n_samples]
    window = torch.hann_window(N_FFT, device=audio.device)
    stft = torch.stft(audio, N_FFT, HOP_LENGTH, window=window, return_complex=True)
    power = (stft[..., :-1].abs() ** 2).contiguous()
    mel = mel_filters(n_mels, audio.device) @ power
    log_spec = torch.clamp(mel, min=1e-10).log10()
    if log_spec.dim() == 3:
        peak = log_spec.amax(dim=(1, 2), keepdim=True)
    else:
        peak = log_spec.max()
    log_spec = torch.maximum(log_spec, peak - 8.0)
    return (log_spec + 4.0) / 4.0
