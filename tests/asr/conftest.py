"""The tiny Whisper program, its eager model and tokenizer, and transformers' generate to compare with."""

from __future__ import annotations

import pytest
import torch

from pterun.asr import Seq2SeqRunner
from tests.support import asr_programs
from tests.support.asr_programs import EOT, IDS


@pytest.fixture(scope="session")
def whisper():
    return asr_programs.whisper_program()


@pytest.fixture(scope="session")
def runner(whisper):
    return Seq2SeqRunner(whisper.pte, whisper.tokenizer)


@pytest.fixture(scope="session")
def eager():
    return asr_programs.tiny_whisper()


@pytest.fixture(scope="session")
def extractor():
    from transformers import WhisperFeatureExtractor

    return WhisperFeatureExtractor(feature_size=80)


@pytest.fixture(scope="session")
def hf_tokenizer(whisper):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(whisper.tokenizer))


# What the runner suppresses by default, written out from Whisper's rules: the prompt's markers always, and at a
# window's first token the blank and <|endoftext|> (the generation configs of Hugging Face's checkpoints list the
# same as suppress_tokens and begin_suppress_tokens).
NEVER_GENERATED = [IDS[m] for m in ("<|translate|>", "<|transcribe|>", "<|startoftranscript|>", "<|startofprev|>",
                                    "<|startoflm|>", "<|nospeech|>")]


@pytest.fixture(scope="session")
def generate(eager, hf_tokenizer):
    """transformers' generate on the eager model: the prompt and the generated tokens (EOS included)."""
    (blank,) = hf_tokenizer.encode(" ").ids

    def run(features: torch.Tensor, max_new_tokens: int, language: str | None = None,
            task: str = "transcribe") -> list[int]:
        with torch.no_grad():
            out = eager.generate(
                features, generation_config=eager.generation_config, max_new_tokens=max_new_tokens, task=task,
                language=language, suppress_tokens=NEVER_GENERATED, begin_suppress_tokens=[blank, EOT],
                return_dict_in_generate=True,
            )
        return out.sequences[0].tolist()

    return run


def features_of(extractor, audio: torch.Tensor) -> torch.Tensor:
    """WhisperFeatureExtractor's features of one window of audio: [1, 80, 3000]."""
    return extractor(audio.numpy(), sampling_rate=16000, return_tensors="pt").input_features
