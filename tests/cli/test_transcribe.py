"""`pterun transcribe`: a WAV file at any rate to the transcript the Python API gives, streamed to stdout, the stats
line on stderr; --json; a user's mistake is one error line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from scipy.io import wavfile
from typer.testing import CliRunner

from pterun.asr import Seq2SeqRunner, TranscribeConfig, load_wav
from pterun.cli.main import app
from tests.support.asr_programs import clip, whisper_program

cli = CliRunner()


@pytest.fixture(scope="module")
def whisper():
    return whisper_program()


@pytest.fixture(scope="module")
def speech(tmp_path_factory):
    """35 s of stereo 16-bit audio at 44.1 kHz: resampled, mixed down and cut into two windows."""
    from pterun.asr import resample

    mono = resample(torch.cat([clip(30, 1), clip(5, 4)]).numpy(), 16000, 44100)
    path = tmp_path_factory.mktemp("audio") / "speech.wav"
    wavfile.write(path, 44100, (np.stack([mono, mono], axis=1) * 32767).astype(np.int16))
    return path


def test_the_transcript_is_the_python_apis(whisper, speech):
    result = cli.invoke(app, ["transcribe", str(speech), str(whisper.pte), "-t", str(whisper.tokenizer), "-n", "20"])
    assert result.exit_code == 0, result.output
    expected = Seq2SeqRunner(whisper.pte, whisper.tokenizer).transcribe(
        load_wav(speech), config=TranscribeConfig(max_new_tokens=20))
    assert len(expected.segments) == 2 and expected.text.strip(), "premise: two windows that say something"
    assert result.stdout == expected.text + "\n"
    assert "35.0 s of audio in 2 windows" in result.stderr and "real time" in result.stderr


def test_json_holds_the_segments(whisper, speech):
    args = ["transcribe", str(speech), str(whisper.pte), "-t", str(whisper.tokenizer.parent), "-n", "8",
            "--language", "de", "--json"]
    result = cli.invoke(app, args)
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["language"] == "de" and [s["start"] for s in document["segments"]] == [0.0, 30.0]
    assert document["text"] == "".join(s["text"] for s in document["segments"])
    assert result.stderr.strip() == document["text"].strip()  # streamed to stderr with --json


def test_mistakes_are_one_error_line(whisper, speech, tmp_path):
    not_wav = tmp_path / "notes.wav"
    not_wav.write_text("words, not sound")
    cases = [
        (["transcribe", str(tmp_path / "missing.wav"), str(whisper.pte), "-t", str(whisper.tokenizer)], "missing.wav"),
        (["transcribe", str(not_wav), str(whisper.pte), "-t", str(whisper.tokenizer)], "not a WAV file"),
        (["transcribe", str(speech), str(whisper.pte), "-t", str(whisper.tokenizer), "--language", "xx"],
         "language 'xx'"),
        (["transcribe", str(speech), str(whisper.pte), "-t", str(whisper.tokenizer), "--task", "summarize"],
         "task: expected one of transcribe, translate"),
        (["transcribe", str(speech), str(whisper.tokenizer), "-t", str(whisper.tokenizer)], "ET12"),
    ]
    for args, culprit in cases:
        result = cli.invoke(app, args)
        assert result.exit_code == 1, (args, result.output)
        assert result.output.count("error:") == 1 and culprit in result.output and "Traceback" not in result.output
