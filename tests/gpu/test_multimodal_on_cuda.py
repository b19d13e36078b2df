"""pterun.llm's MultimodalRunner on a CUDA device: the LLaVA and Voxtral programs of tests/llm generate on the GPU
the text they generate on the CPU (where tests/llm holds them to ExecuTorch's runner), their encoders and KV
caches in device memory."""

from __future__ import annotations

import json

import pytest
import torch

from pterun.llm import GenerationConfig, MultimodalRunner, make_audio_input, make_image_input, make_text_input
from tests.support.multimodal_programs import MultimodalProgram, media

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("name", ["llava", "voxtral"])
def test_generation_on_cuda_is_the_cpus(name):
    from tests.gpu.conftest import FIXTURES

    directory = FIXTURES / "multimodal" / name
    if not directory.exists():
        pytest.skip("no fixtures: run scripts/make-gpu-fixtures.py")
    spec = json.loads((directory / "spec.json").read_text())
    program = MultimodalProgram(name, directory / "program.pte", directory / "tokenizer.json", spec["modality"],
                                spec["media_tokens"], spec["uint8_images"])
    make = make_image_input if program.modality == "vision" else make_audio_input
    inputs = [make_text_input("The quick"), make(media(program)), make_text_input(" brown fox")]
    config = GenerationConfig(temperature=0.0, max_new_tokens=20, echo=False)
    cpu = MultimodalRunner(program.pte, program.tokenizer)
    gpu = MultimodalRunner(program.pte, program.tokenizer, device="cuda")
    expected = cpu.generate_text(inputs, config)
    assert expected and cpu.pos > program.media_tokens, "premise: the media filled positions and text came out"
    assert gpu.generate_text(inputs, config) == expected
    method = gpu.decoder.text_decoder
    values = [method.value(i) for i in range(len(method.plan.values))]
    caches = [t for t in values if isinstance(t, torch.Tensor) and t.dim() == 4]
    assert caches and all(t.is_cuda for t in caches), "the KV caches stay in device memory"
