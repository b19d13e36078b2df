"""transformers audio encoders (random weights, small configs) against ExecuTorch's runtime."""

from __future__ import annotations

import pytest

from tests.support.differential import check_model, lowerings


@lowerings
@pytest.mark.parametrize("name", ["whisper_encoder", "wav2vec2"])
def test_audio_model(name, lower):
    check_model(name, lower)
