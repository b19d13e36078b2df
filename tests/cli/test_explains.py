"""The command line explains itself: help for every option, examples in every command's help, what `run` fed
the program, which way bench's ratio is better, and progress on a terminal only."""

from __future__ import annotations

import io
import json

import pytest
import torch
import typer.main
from rich.console import Console
from typer.testing import CliRunner

from pterun.cli import report
from pterun.cli.bench import RATIO
from pterun.cli.main import app

runner = CliRunner()


def _commands() -> dict:
    group = typer.main.get_command(app)  # Typer's own copy of click: its classes are not click's
    return dict(getattr(group, "commands", {}))


def test_every_option_has_help_and_every_command_examples():
    commands = _commands()
    assert len(commands) >= 8, sorted(commands)
    for name, command in commands.items():
        assert "Example" in (command.help or ""), f"pterun {name} --help shows no example"
        for param in command.params:
            if param.param_type_name == "option":
                assert (param.help or "").strip(), f"pterun {name} {param.opts[0]} has no help"
    group = typer.main.get_command(app)
    assert all((p.help or "").strip() for p in group.params if p.param_type_name == "option")


def _examples(help_text: str) -> list[str]:
    """The lines of the help's fenced example block."""
    _, _, rest = help_text.partition("```\n")
    block, _, _ = rest.partition("```")
    return [line.strip() for line in block.splitlines() if line.strip()]


@pytest.mark.parametrize("columns", [80, 120])
def test_the_examples_print_as_a_block_of_whole_commands(columns):
    commands = _commands()
    assert _examples(commands["run"].help)[1] == "pterun run model.pte --inputs inputs.pt --device cuda"
    for name, command in commands.items():
        result = runner.invoke(app, [name, "--help"], env={"COLUMNS": str(columns)}, terminal_width=columns)
        assert result.exit_code == 0, result.output
        assert max(len(line) for line in result.output.splitlines()) == columns  # the premise: drawn this wide
        lines = [line.strip() for line in result.output.splitlines()]
        # One example a line, kept whole, and no fence or markup left over.
        for example in _examples(command.help):
            assert example in lines, f"pterun {name} --help at {columns} columns breaks {example!r}"
        assert "```" not in result.output and "**" not in result.output


def test_run_says_it_fed_random_inputs_from_the_metadata_and_the_seed():
    result = runner.invoke(app, ["run", "--repeat", "1", "--warmup", "0", "--seed", "5"])
    assert result.exit_code == 0, result.output
    assert "inputs (random from the metadata, seed 5): #0 int64 [1, 64]" in result.output


def test_run_says_which_file_it_fed(tmp_path):
    torch.save([torch.randint(0, 1024, (1, 9))], tmp_path / "tokens.pt")
    result = runner.invoke(app, ["run", "--inputs", str(tmp_path / "tokens.pt"), "-n", "1", "--warmup", "0"])
    assert result.exit_code == 0, result.output
    assert f"inputs ({tmp_path / 'tokens.pt'}): #0 int64 [1, 9]" in result.output


def test_bench_says_which_way_its_ratio_is_better():
    result = runner.invoke(app, ["bench", "--against", "", "-n", "2", "--warmup", "0"])
    assert result.exit_code == 0, result.output
    assert RATIO in result.output
    assert f"{RATIO}: below 1 means pterun is faster" in result.output


def test_progress_is_drawn_on_a_terminal_only_and_never_in_json(monkeypatch):
    # Captured output is not a terminal: no progress.
    plain = runner.invoke(app, ["bench", "--against", "", "-n", "2", "--warmup", "1", "--json"])
    assert plain.exit_code == 0, plain.output
    assert "rounds" not in plain.output and "loading" not in plain.output
    # On a terminal, the steps are drawn on stderr; stdout holds the JSON alone.
    terminal = io.StringIO()
    monkeypatch.setattr(report, "errors", Console(file=terminal, force_terminal=True, width=100))
    result = runner.invoke(app, ["bench", "--against", "", "-n", "2", "--warmup", "1", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["results"][0]["name"] == "pterun"
    drawn = terminal.getvalue()
    assert "loading llama_tiny.pte" in drawn and "warm-up" in drawn and "rounds" in drawn


def test_compile_reaches_the_loader_and_run_says_how_it_went(monkeypatch):
    from pterun import Runtime

    asked, load = [], Runtime.load_program

    def recording(self, *args, **kwargs):
        asked.append(kwargs.get("compile"))
        return load(self, *args, **{**kwargs, "compile": False})  # torch.compile itself takes minutes here

    monkeypatch.setattr(Runtime, "load_program", recording)
    result = runner.invoke(app, ["run", "--compile", "-n", "1", "--warmup", "0"])
    assert result.exit_code == 0, result.output
    assert asked == [True]
    assert "torch.compile: " in result.output
