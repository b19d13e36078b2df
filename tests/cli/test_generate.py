"""`pterun generate`: the bundled example LLM streams text and a stats line; --json gives the runner's Stats."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from pterun.cli.main import app
from pterun.cli.options import example_llm

runner = CliRunner()


def test_the_bundled_example_generates_and_reports():
    program, tokenizer = example_llm()
    assert program.exists() and tokenizer.exists(), "the example LLM is package data: no premise"
    result = runner.invoke(app, ["generate", "--prompt", "Once upon a time", "--max-new-tokens", "12"])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("Once upon a time")  # echoed, then the new text
    assert "prompt tokens" in result.stdout and "generated" in result.stdout and "tok/s" in result.stdout


def test_json_is_the_runners_stats():
    result = runner.invoke(app, ["generate", "--max-new-tokens", "5", "--no-echo", "--json"])
    assert result.exit_code == 0, result.output
    stats = json.loads(result.stdout.strip().splitlines()[-1])
    assert 1 <= stats["generated_tokens"] <= 5 and stats["prompt_tokens"] > 0
    assert stats["inference_start_ms"] <= stats["first_token_ms"] <= stats["inference_end_ms"]


def test_greedy_output_is_the_same_twice():
    args = ["generate", "--prompt", "The cache", "--max-new-tokens", "10", "--json"]
    first, second = (runner.invoke(app, args) for _ in range(2))
    assert first.exit_code == second.exit_code == 0
    assert first.stderr == second.stderr  # the text goes to stderr with --json


def test_mistakes_are_one_error_line(tmp_path):
    program, _ = example_llm()
    missing = runner.invoke(app, ["generate", str(program)])
    assert missing.exit_code == 1 and "--tokenizer" in missing.output and "Traceback" not in missing.output
    bad = tmp_path / "tok.json"
    bad.write_text("not a tokenizer")
    result = runner.invoke(app, ["generate", str(program), "--tokenizer", str(bad)])
    assert result.exit_code == 1 and result.output.count("error:") == 1 and "Traceback" not in result.output
    not_llm = runner.invoke(app, ["generate", str(program.with_name("llama_tiny.pte")), "--tokenizer",
                                  str(example_llm()[1])])
    assert not_llm.exit_code == 1 and "error:" in not_llm.output


def test_a_seed_makes_sampling_repeat():
    args = ["generate", "--temperature", "0.9", "--seed", "7", "--max-new-tokens", "16", "--no-echo", "--json"]
    first, second = (runner.invoke(app, args) for _ in range(2))
    assert first.exit_code == second.exit_code == 0
    greedy = runner.invoke(app, ["generate", "--max-new-tokens", "16", "--no-echo", "--json"])
    assert first.stderr == second.stderr and first.stderr != greedy.stderr  # premise: sampling chose otherwise


def test_weights_from_a_ptd_file():
    from tests.support import llm_programs

    program = llm_programs.llama_program("xnnpack-8da4w-ptd")
    assert program.data is not None and program.data.exists(), "premise: the weights live in a .ptd"
    args = ["generate", str(program.pte), "--tokenizer", str(program.tokenizer), "--max-new-tokens", "8", "--json"]
    without = runner.invoke(app, args)
    assert without.exit_code == 1 and "error:" in without.output  # the program cannot run without its weights
    result = runner.invoke(app, [*args, "--data", str(program.data)])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout.strip().splitlines()[-1])["generated_tokens"] >= 1
