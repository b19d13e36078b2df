"""The `pterun` command: its global options and its commands, one module each (`pterun run`: run.py,
`inspect`: inspect.py, `bench`: bench.py, `test`: bundled.py, `profile`, `compare`, `generate`, `transcribe`,
`batch`)."""

from __future__ import annotations

import typer

from pterun.cli.batch import batch
from pterun.cli.bench import bench
from pterun.cli.bundled import run_tests
from pterun.cli.compare import compare
from pterun.cli.generate import generate
from pterun.cli.inspect import inspect
from pterun.cli.profile import profile
from pterun.cli.report import state
from pterun.cli.run import run
from pterun.cli.transcribe import transcribe
from pterun.version import VERSION

# Help texts are Markdown: an example block renders as a block in the terminal and on the docs site alike.
app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode="markdown",
                  help="Run and inspect ExecuTorch programs (.pte).")


def _version(shown: bool) -> None:
    if shown:
        typer.echo(f"pterun {VERSION}")
        raise typer.Exit()


@app.callback()
def options(
    debug: bool = typer.Option(
        False, "--debug", envvar="PTERUN_DEBUG", help="Show the Python traceback of an error instead of one line."
    ),
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print pterun's version and exit."
    ),
) -> None:
    state.debug = debug


app.command()(run)
app.command()(inspect)
app.command()(bench)
app.command("test")(run_tests)
app.command()(profile)
app.command()(compare)
app.command()(generate)
app.command()(transcribe)
app.command()(batch)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
