"""pterun.asr on a CUDA device: the tiny Whisper of tests/asr transcribes on the GPU what it transcribes on the CPU,
its features computed and its KV cache kept in device memory."""

from __future__ import annotations

import pytest
import torch

from pterun.asr import Seq2SeqRunner, TranscribeConfig, log_mel_spectrogram
from tests.support.asr_programs import clip

pytestmark = pytest.mark.gpu


def test_transcription_on_cuda_is_the_cpus():
    from tests.gpu.conftest import FIXTURES

    directory = FIXTURES / "asr" / "whisper"
    if not directory.exists():
        pytest.skip("no fixtures: run scripts/make-gpu-fixtures.py")
    program, tokenizer = directory / "program.pte", directory / "tokenizer.json"
    cpu, gpu = Seq2SeqRunner(program, tokenizer), Seq2SeqRunner(program, tokenizer, device="cuda")
    audio = torch.cat([clip(30, 1), clip(4, 5)])
    for config in (TranscribeConfig(max_new_tokens=40), TranscribeConfig(language="de", max_new_tokens=40)):
        expected = cpu.transcribe(audio, config=config)
        assert len(expected.segments) == 2 and expected.text, "premise: the CPU transcribed two windows"
        assert gpu.transcribe(audio.cuda(), config=config) == expected
    torch.testing.assert_close(log_mel_spectrogram(audio[:16000].cuda()).cpu(), log_mel_spectrogram(audio[:16000]),
                               rtol=1e-4, atol=1e-4)
    method = gpu.decoder
    values = [method.value(i) for i in range(len(method.plan.values))]
    caches = [t for t in values if isinstance(t, torch.Tensor) and t.dim() == 4]
    assert caches and all(t.is_cuda for t in caches), "the KV caches stay in device memory"
