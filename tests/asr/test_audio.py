"""Audio in: WAV files of the common encodings read as mono float at 16 kHz, and samples Whisper cannot hear
refused by name."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.io import wavfile

from pterun.asr import load_wav, resample
from pterun.asr.audio import waveform
from pterun.errors import AccessFailed, ErrorCode, InvalidArgument, InvalidArgumentType

RATE = 16000


def _tone(rate: int, seconds: float = 0.5, hz: float = 440.0) -> np.ndarray:
    t = np.arange(int(rate * seconds)) / rate
    return 0.5 * np.sin(2 * np.pi * hz * t)


@pytest.mark.parametrize("dtype, scale", [(np.int16, 32768), (np.int32, 2**31), (np.float32, 1.0)])
def test_a_16_khz_wav_reads_as_its_samples(tmp_path, dtype, scale):
    tone = _tone(RATE)
    path = tmp_path / "tone.wav"
    wavfile.write(path, RATE, (tone * (scale - 1 if scale > 1 else 1)).astype(dtype))
    samples = load_wav(path)
    assert samples.dtype == np.float32 and samples.shape == tone.shape
    np.testing.assert_allclose(samples, tone, atol=1e-4)


def test_8_bit_wav_is_unsigned(tmp_path):
    tone = _tone(RATE)
    path = tmp_path / "tone8.wav"
    wavfile.write(path, RATE, np.round(tone * 127 + 128).astype(np.uint8))
    np.testing.assert_allclose(load_wav(path), tone, atol=1 / 127)


def test_stereo_at_44_1_khz_is_mixed_down_and_resampled(tmp_path):
    left, right = _tone(44100, 1.0, 440.0), _tone(44100, 1.0, 1000.0)
    path = tmp_path / "stereo.wav"
    wavfile.write(path, 44100, (np.stack([left, right], axis=1) * 32767).astype(np.int16))
    samples = load_wav(path)
    assert samples.shape == (RATE,) and samples.dtype == np.float32
    spectrum = np.abs(np.fft.rfft(samples))  # 1 Hz per bin over one second
    peaks = sorted(np.argsort(spectrum)[-2:])
    assert peaks == [440, 1000] and spectrum[440] == pytest.approx(spectrum[1000], rel=0.05)


def test_resample_keeps_a_tone():
    samples = resample(_tone(48000, 1.0, 300.0), 48000)
    assert samples.shape == (RATE,)
    np.testing.assert_allclose(samples[100:-100], _tone(RATE, 1.0, 300.0)[100:-100], atol=2e-3)
    np.testing.assert_array_equal(resample(samples, RATE), samples)  # at its own rate: as it is


def test_a_missing_file_and_a_file_that_is_not_wav(tmp_path):
    with pytest.raises(AccessFailed, match="missing.wav: cannot read the audio file") as error:
        load_wav(tmp_path / "missing.wav")
    assert error.value.code == ErrorCode.AccessFailed
    text = tmp_path / "notes.wav"
    text.write_text("not audio at all")
    with pytest.raises(InvalidArgument, match="notes.wav: not a WAV file") as error:
        load_wav(text)
    assert error.value.code == ErrorCode.InvalidArgument


@pytest.mark.parametrize("audio, rate, error, message", [
    (torch.zeros(RATE), 44100, InvalidArgument, "audio: expected audio sampled at 16000 Hz, found 44100 Hz"),
    (torch.zeros(RATE, dtype=torch.int16), RATE, InvalidArgument, "audio: expected float samples .* found torch.int16"),
    (np.zeros(RATE, dtype=np.int16), RATE, InvalidArgument, "audio: expected float samples .* found torch.int16"),
    (torch.zeros(2, RATE), RATE, InvalidArgument, r"audio: expected mono samples \[n\], found shape \[2, 16000\]"),
    (torch.zeros(0), RATE, InvalidArgument, "audio: expected samples, found none"),
    (torch.tensor([0.0, float("nan")]), RATE, InvalidArgument, "audio: expected finite samples"),
    ([0.0, 0.1], RATE, InvalidArgumentType, "audio: expected a 1-D torch.Tensor or NumPy array .* found list"),
    (torch.zeros(RATE), 16000.0, InvalidArgumentType, "sample_rate: expected an int"),
])
def test_samples_whisper_cannot_hear_are_refused_by_name(audio, rate, error, message):
    with pytest.raises(error, match=message) as raised:
        waveform(audio, rate)
    assert raised.value.code == ErrorCode.InvalidArgument


def test_float64_and_numpy_samples_are_taken():
    samples = waveform(np.linspace(-1, 1, 100), RATE)
    assert samples.dtype == torch.float32 and samples.shape == (100,)
