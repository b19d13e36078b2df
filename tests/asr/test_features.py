"""Whisper's log-mel features against transformers' WhisperFeatureExtractor, which Whisper's users feed models."""

from __future__ import annotations

import pytest
import torch

from pterun.asr import log_mel_spectrogram, mel_filters
from pterun.asr.features import N_FRAMES, N_SAMPLES
from pterun.errors import InvalidArgument


@pytest.mark.parametrize("n_mels", [80, 128])
def test_the_mel_filters_are_transformers(n_mels):
    from transformers import WhisperFeatureExtractor

    expected = torch.from_numpy(WhisperFeatureExtractor(feature_size=n_mels).mel_filters.T).to(torch.float32)
    filters = mel_filters(n_mels)
    assert filters.shape == (n_mels, 201) and filters.dtype == torch.float32
    torch.testing.assert_close(filters, expected, rtol=1e-6, atol=1e-9)


# Shorter than a window (padded), exactly one, longer (cut), and shorter than one frame.
@pytest.mark.parametrize("n_samples", [3 * 16000, N_SAMPLES, N_SAMPLES + 12345, 250])
@pytest.mark.parametrize("n_mels", [80, 128])
def test_the_features_are_the_feature_extractors(n_samples, n_mels):
    from transformers import WhisperFeatureExtractor

    audio = 0.1 * torch.randn(n_samples, generator=torch.Generator().manual_seed(n_samples))
    expected = WhisperFeatureExtractor(feature_size=n_mels)(
        audio.numpy(), sampling_rate=16000, return_tensors="pt").input_features[0]
    features = log_mel_spectrogram(audio, n_mels)
    assert features.shape == (n_mels, N_FRAMES) == expected.shape and features.dtype == torch.float32
    torch.testing.assert_close(features, expected, rtol=1e-5, atol=1e-5)


def test_a_batch_is_floored_per_clip_as_the_feature_extractor_floors_it():
    from transformers import WhisperFeatureExtractor

    loud, quiet = torch.randn(2, 16000, generator=torch.Generator().manual_seed(1)) * torch.tensor([[1.0], [1e-3]])
    expected = WhisperFeatureExtractor()([loud.numpy(), quiet.numpy()], sampling_rate=16000,
                                         return_tensors="pt").input_features
    features = log_mel_spectrogram(torch.stack([loud, quiet]))
    assert features[0].max() != features[1].max(), "premise: each clip has its own maximum"
    torch.testing.assert_close(features, expected, rtol=1e-5, atol=1e-5)


def test_silence_is_the_floor():
    features = log_mel_spectrogram(torch.zeros(16000))
    assert torch.all(features == features[0, 0]) and float(features[0, 0]) == pytest.approx((-10 + 4) / 4)


@pytest.mark.parametrize("n_mels", [0, -1, 2.5, True])
def test_a_bad_number_of_bands_is_refused(n_mels):
    with pytest.raises(InvalidArgument, match=f"n_mels must be a positive int, got {n_mels!r}") as error:
        mel_filters(n_mels)
    assert error.value.code == 0x12
