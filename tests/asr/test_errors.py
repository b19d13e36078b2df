"""Misuse, programs that are not encoder-decoders and tokenizers that are not Whisper's: typed errors naming what
is wrong, and a runner that still transcribes afterwards."""

from __future__ import annotations

import json
from importlib import resources

import pytest
import torch

from pterun.asr import Seq2SeqRunner, TranscribeConfig
from pterun.errors import AccessFailed, ErrorCode, InvalidArgument, InvalidArgumentType, InvalidProgram
from tests.support.asr_programs import clip
from tests.support.exporting import ExportSpec, export_program

CONFIG = TranscribeConfig(language="en", max_new_tokens=8)


@pytest.fixture(scope="module")
def reference(runner):
    """What the runner says of a clip before anything goes wrong: it must say the same after."""
    return runner.transcribe(clip(4, 0), config=CONFIG)


def _still_works(runner, reference) -> None:
    assert runner.transcribe(clip(4, 0), config=CONFIG) == reference


@pytest.mark.parametrize("call, error, message", [
    (lambda r: r.transcribe(clip(1, 0), sample_rate=8000), InvalidArgument,
     "audio: expected audio sampled at 16000 Hz, found 8000 Hz"),
    (lambda r: r.transcribe((clip(1, 0) * 32767).to(torch.int16)), InvalidArgument,
     "audio: expected float samples in .* found torch.int16"),
    (lambda r: r.transcribe(torch.stack([clip(1, 0), clip(1, 1)])), InvalidArgument,
     r"audio: expected mono samples \[n\], found shape \[2, 16000\]"),
    (lambda r: r.transcribe("speech.wav"), InvalidArgumentType, "audio: expected a 1-D torch.Tensor .* found str"),
    (lambda r: r.transcribe_features(torch.zeros(80, 1500)), InvalidArgument,
     r"features: expected log-mel features \[80, 3000\] .* found \[80, 1500\] of torch.float32"),
    (lambda r: r.transcribe_features(torch.zeros(128, 3000)), InvalidArgument,
     r"features: expected log-mel features \[80, 3000\].* found \[128, 3000\] of torch.float32"),
    (lambda r: r.transcribe_features(torch.zeros(80, 3000, dtype=torch.int64)), InvalidArgument,
     r"features: .* found \[80, 3000\] of torch.int64"),
    (lambda r: r.transcribe(clip(1, 0), config=TranscribeConfig(language="xx")), InvalidArgument,
     "language 'xx': expected one of the tokenizer's language codes, en, zh, de, es, ru, fr"),
    (lambda r: r.transcribe(clip(1, 0), config=TranscribeConfig(suppress_tokens=(5, 9999))), InvalidArgument,
     r"token ids \[9999\] are past the program's 274 logits"),
    (lambda r: r.transcribe(clip(1, 0), config={"language": "en"}), InvalidArgumentType,
     "config: expected a TranscribeConfig, found dict"),
])
def test_bad_calls_are_refused_by_name_and_the_runner_goes_on(runner, reference, call, error, message):
    with pytest.raises(error, match=message) as raised:
        call(runner)
    assert raised.value.code == ErrorCode.InvalidArgument
    _still_works(runner, reference)


@pytest.mark.parametrize("fields, message", [
    ({"task": "summarize"}, "task: expected one of transcribe, translate, found 'summarize'"),
    ({"max_new_tokens": 0}, "max_new_tokens must be positive, got 0"),
    ({"temperature": 1.5}, r"temperature must be in \[0, 1\], got 1.5"),
    ({"eos_token_ids": (-1,)}, "eos_token_ids: expected non-negative int token ids, found -1"),
    ({"suppress_tokens": 5}, "suppress_tokens: expected token ids, found int"),
    ({"language": 7}, "language: expected a language code such as 'en', found int"),
])
def test_bad_configs_are_refused_by_name(fields, message):
    with pytest.raises(InvalidArgument, match=message) as raised:
        TranscribeConfig(**fields)
    assert raised.value.code == ErrorCode.InvalidArgument


class _Scale(torch.nn.Module):
    def forward(self, x):
        return x * 2.0


def test_a_program_that_is_not_an_encoder_decoder(whisper):
    example = resources.files("pterun.examples") / "llama_tiny.pte"
    with pytest.raises(InvalidProgram, match=r"not an encoder-decoder program: expected methods 'encoder' and "
                                             r"'text_decoder' .* found \['forward'\]") as raised:
        Seq2SeqRunner(str(example), whisper.tokenizer)
    assert raised.value.code == ErrorCode.InvalidProgram


def test_methods_of_the_wrong_shape_are_refused_at_load(whisper):
    modules = {"encoder": _Scale(), "text_decoder": _Scale()}
    exported = export_program("asr-wrong-methods-v1", lambda: ExportSpec(
        modules, {"encoder": (torch.ones(1, 4),), "text_decoder": (torch.ones(1, 4),)}))
    runner = Seq2SeqRunner(exported.pte, whisper.tokenizer)
    with pytest.raises(InvalidProgram, match=r"method 'encoder': expected features \[1, n_mels, n_frames\] of "
                                             r"floats, found \[1, 4\]") as raised:
        runner.transcribe(clip(1, 0))
    assert raised.value.code == ErrorCode.InvalidProgram and not runner.is_loaded()


def test_metadata_that_is_not_integers_is_refused(whisper):
    exported = export_program("asr-float-metadata-v1", lambda: ExportSpec(
        {"encoder": _Scale(), "text_decoder": _Scale()},
        {"encoder": (torch.ones(1, 4),), "text_decoder": (torch.ones(1, 4),)},
        constant_methods={"get_max_seq_len": 2.5}))
    with pytest.raises(InvalidProgram, match="metadata method 'get_max_seq_len': expected integers, found float"):
        Seq2SeqRunner(exported.pte, whisper.tokenizer)


def test_tokenizers_that_are_not_whispers(whisper, tmp_path):
    from tests.support.llm_tokenizers import tokenizer_path

    llm = tokenizer_path("hf")
    with pytest.raises(InvalidArgument, match=f"{llm}: expected Whisper's special tokens, found no <\\|endoftext\\|>"):
        Seq2SeqRunner(whisper.pte, llm)
    with pytest.raises(InvalidArgument, match="expected Whisper's tokenizer.json"):
        Seq2SeqRunner(whisper.pte, tokenizer_path("sentencepiece"))
    with pytest.raises(AccessFailed, match="missing.json"):
        Seq2SeqRunner(whisper.pte, tmp_path / "missing.json")
    # Whisper's markers at other ids than the program's: another model's tokenizer.
    document = json.loads(whisper.tokenizer.read_text())
    for token in document["added_tokens"]:
        if token["content"] == "<|startoftranscript|>":
            token["id"] = 9000
    shifted = tmp_path / "shifted.json"
    shifted.write_text(json.dumps(document))
    with pytest.raises(InvalidArgument, match=r"<\|startoftranscript\|> is token 9000, past the program's 274 logits"):
        Seq2SeqRunner(whisper.pte, shifted).load()


def test_a_tokenizer_directory_is_read_as_its_tokenizer_json(whisper, runner, reference):
    directory_runner = Seq2SeqRunner(whisper.pte, whisper.tokenizer.parent)
    assert directory_runner.transcribe(clip(4, 0), config=CONFIG) == reference
