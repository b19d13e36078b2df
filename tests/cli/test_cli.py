"""`pterun run` and `pterun inspect`, on the bundled example and on error."""

from __future__ import annotations

import torch
from typer.testing import CliRunner

import pterun
from pterun.cli.main import app, example_program
from tests.support.compare import assert_matches
from tests.support.oracle import run_reference

runner = CliRunner()


def test_run_with_no_argument_runs_the_bundled_example():
    result = runner.invoke(app, ["run", "--repeat", "2", "--warmup", "0"])
    assert result.exit_code == 0, result.output
    assert "llama_tiny.pte" in result.output and "float32" in result.output
    assert "execute median" in result.output and "[1, 64, 1024]" in result.output


def test_run_reads_inputs_from_a_file(tmp_path):
    tokens = torch.randint(0, 1024, (1, 9))
    torch.save([tokens], tmp_path / "tokens.pt")
    result = runner.invoke(app, ["run", "--inputs", str(tmp_path / "tokens.pt"), "-n", "1", "--warmup", "0"])
    assert result.exit_code == 0, result.output
    assert "[1, 9, 1024]" in result.output


def test_inspect_shows_methods_operators_and_arenas():
    result = runner.invoke(app, ["inspect", str(example_program())])
    assert result.exit_code == 0, result.output
    for fragment in ("method forward", "input 0", "Long", "aten::mm.out", "memory arenas", "on cpu", "delegates"):
        assert fragment in result.output


def test_errors_are_reported_with_their_code(tmp_path):
    bad = tmp_path / "bad.pte"
    bad.write_bytes(b"\0" * 64)
    result = runner.invoke(app, ["inspect", str(bad)])
    assert result.exit_code == 1
    assert "InvalidProgram 0x23" in result.output


def test_bundled_example_matches_executorch_at_several_lengths():
    method = pterun.Runtime.get().load_program(example_program()).load_method("forward")
    generator = torch.Generator().manual_seed(1)
    for length in (1, 7, 64):
        tokens = torch.randint(0, 1024, (1, length), generator=generator)
        assert_matches(method.execute([tokens]), run_reference(example_program(), [tokens]))
