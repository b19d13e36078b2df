"""What the docs' snippets refer to, made once per session: ``model.pte`` (an image model taking ``x``, a
[1, 3, 224, 224] tensor), its weights as ``model.ptd``, its ETRecord as ``etrecord.bin`` and ``model.etrecord``,
the bundled example LLM as ``llama.pte`` with its ``tokenizer.json``, a tiny Whisper as ``whisper/model.pte``
with its ``whisper/tokenizer.json`` and four seconds of 16-bit audio to transcribe, ``speech.wav``, and for
multimodal generation the test programs ``llava.pte`` and ``voxtral.pte`` (the same tokenizer as the LLM's),
ExecuTorch's audio processor for the latter as ``preprocessor.pte``, an image ``cat.jpg`` and a 16 kHz
``clip.wav``."""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path

import pytest
import torch

from tests.support import asr_programs
from tests.support.exporting import ExportSpec, export_program
from tests.support.inspecting import Recorded, export_recorded

INPUT = (1, 3, 224, 224)


class SmallCnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        with torch.random.fork_rng():  # seeded weights, and the process's generator left as it was
            torch.manual_seed(0)
            self.features = torch.nn.Sequential(
                torch.nn.Conv2d(3, 8, 3, stride=2), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten()
            )
            self.head = torch.nn.Linear(8, 10)

    def forward(self, x):
        return self.head(self.features(x))


def example_input() -> torch.Tensor:
    return torch.randn(INPUT, generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="session")
def doc_files(tmp_path_factory) -> Path:
    """A directory of the files the snippets name; each page runs in a copy of it."""
    recorded = export_recorded("docs-small-cnn", lambda: Recorded(SmallCnn(), (example_input(),)))
    external = export_program(
        "docs-small-cnn-ptd", lambda: ExportSpec(SmallCnn(), (example_input(),), config={"external_constants": True})
    )
    assert len(external.ptd) == 1, external.ptd  # the premise of model.ptd: the weights, outside the program
    root = tmp_path_factory.mktemp("doc-files")
    shutil.copyfile(recorded.pte, root / "model.pte")
    shutil.copyfile(external.ptd[0], root / "model.ptd")
    shutil.copyfile(recorded.etrecord, root / "etrecord.bin")
    shutil.copyfile(recorded.etrecord, root / "model.etrecord")
    examples = resources.files("pterun.examples")
    shutil.copyfile(str(examples / "llm_tiny.pte"), root / "llama.pte")
    shutil.copyfile(str(examples / "llm_tiny.tokenizer.json"), root / "tokenizer.json")
    whisper = asr_programs.whisper_program()
    (root / "whisper").mkdir()
    shutil.copyfile(whisper.pte, root / "whisper" / "model.pte")
    shutil.copyfile(whisper.tokenizer, root / "whisper" / "tokenizer.json")
    from scipy.io import wavfile

    wavfile.write(root / "speech.wav", 16000, (asr_programs.clip(4, 0).numpy() * 32767).astype("int16"))
    _multimodal_files(root)
    return root


def _multimodal_files(root: Path) -> None:
    import wave

    import numpy as np
    from PIL import Image

    from tests.support.multimodal_programs import audio_processor, multimodal_program

    for name in ("llava", "voxtral"):
        program = multimodal_program(name)
        assert program.tokenizer.read_bytes() == (root / "tokenizer.json").read_bytes(), "premise: one tokenizer"
        shutil.copyfile(program.pte, root / f"{name}.pte")
    shutil.copyfile(audio_processor(), root / "preprocessor.pte")
    pixels = np.random.default_rng(0).integers(0, 256, (120, 160, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(root / "cat.jpg")
    tone = (np.sin(np.arange(16_000) * 2 * np.pi * 440 / 16_000) * 8_000).astype("<i2")
    with wave.open(str(root / "clip.wav"), "wb") as clip:
        clip.setnchannels(1), clip.setsampwidth(2), clip.setframerate(16_000)
        clip.writeframes(tone.tobytes())
