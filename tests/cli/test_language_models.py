"""`pterun run`, `profile` and `bench` on language models: their decoders get valid inputs (token ids in the
vocabulary, positions from 0, as many as a call takes within the context), and one line says what the program
is and how to generate text from it.

Random inputs drawn from the metadata alone put random tokens at random positions, which ExecuTorch's LLM export
cannot take (`et_view`: "shape '[1, 31, 1, 8]' is invalid for input of size 224").
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from pterun.cli.main import app
from tests.support.llm_programs import llama_program, transformers_program
from tests.support.multimodal_programs import multimodal_program

runner = CliRunner()

PROGRAMS = {
    "export_llama-dynamic": lambda: llama_program("dynamic").pte,  # ExecuTorch's export_llama, llama:: ops
    "export_llama-static": lambda: llama_program("static").pte,  # one token per call
    "transformers-static-cache": lambda: transformers_program().pte,  # cache positions, optimum's metadata
    "llava": lambda: multimodal_program("llava").pte,  # multimodal: text_decoder takes embeddings
}


@pytest.fixture(scope="module", params=list(PROGRAMS))
def language_model(request):
    return request.param, PROGRAMS[request.param]()


def _ok(result, name: str) -> str:
    assert result.exit_code == 0, result.output
    assert "error:" not in result.output
    lines = [line for line in result.output.splitlines() if line.startswith("note: ")]
    assert len(lines) == 1, result.output
    assert "is a multimodal language model" in lines[0] if name == "llava" else "is a language model" in lines[0]
    assert "pterun generate" in lines[0] and "--tokenizer TOKENIZER" in lines[0]
    assert ("--image IMAGE" in lines[0]) == (name == "llava")
    return result.output


def test_run_feeds_valid_inputs(language_model):
    name, pte = language_model
    output = _ok(runner.invoke(app, ["run", str(pte), "--repeat", "2", "--warmup", "0"]), name)
    assert "valid for a language model" in output
    assert ("text_decoder" in output) == (name == "llava")  # a multimodal program has no forward


def test_profile_and_bench_feed_valid_inputs(language_model):
    name, pte = language_model
    _ok(runner.invoke(app, ["profile", str(pte), "--iterations", "1", "--warmup", "0", "--top", "3"]), name)
    # --against: ExecuTorch's runtime too (its LLM kernels loaded), on the same inputs.
    _ok(runner.invoke(app, ["bench", str(pte), "--repeat", "2", "--warmup", "0", "--against", "executorch"]), name)


def test_other_methods_of_a_multimodal_program():
    pte = multimodal_program("llava").pte
    embedding = runner.invoke(app, ["run", str(pte), "--method", "token_embedding", "--repeat", "1"])
    assert "valid for a language model" in _ok(embedding, "llava")
    encoder = runner.invoke(app, ["run", str(pte), "--method", "vision_encoder", "--repeat", "1"])
    assert "random from the metadata" in _ok(encoder, "llava")  # an encoder's random inputs are valid as they are


def test_a_program_that_is_no_language_model_has_no_note():
    result = runner.invoke(app, ["run", "--repeat", "1"])  # the bundled example
    assert result.exit_code == 0 and "note:" not in result.output and "random from the metadata" in result.output
