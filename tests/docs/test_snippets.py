"""Every command and Python snippet in the README and the docs runs, so that the docs cannot drift from the code.

Each page runs in a directory of its own holding the files the snippets name (conftest.py), its blocks in the
page's order: Python blocks in one namespace (later blocks use what earlier ones made) which starts with ``x``,
an input for ``model.pte``; ``pterun`` commands in-process through Typer's runner; ``python`` commands in a
subprocess. Each page gets a fresh ``Runtime.get()``, so a snippet that registers a backend changes nothing
for other tests. Blocks that cannot run here say why (blocks.py).
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from typer.testing import CliRunner

import pterun
from pterun.cli.main import app
from tests.docs import blocks
from tests.docs.conftest import example_input

PAGES = blocks.pages()
# The pages test_page_runs runs: those with a block that runs here (the others hold none, or only skipped ones).
RUNNABLE_PAGES = [page for page in PAGES if any(b.runs for b in blocks.blocks(page))]
# The premise: the extraction finds the snippets (a change to the fences' syntax would otherwise pass silently).
MIN_RUNNABLE = 20


def test_blocks_are_found_and_every_skip_says_why():
    every = [b for page in PAGES for b in blocks.blocks(page)]
    runnable = [b for b in every if b.runs]
    skipped = [b for b in every if b.skip is not None]
    assert len(runnable) >= MIN_RUNNABLE, [b.where for b in runnable]
    assert len(RUNNABLE_PAGES) > 1 and blocks.ROOT / "README.md" in RUNNABLE_PAGES, RUNNABLE_PAGES
    assert any(b.lang == "python" for b in runnable) and any(b.lang in blocks.SHELL for b in runnable)
    assert all(len(b.skip) >= 10 for b in skipped), [(b.where, b.skip) for b in skipped]
    assert skipped, "no block is marked skip: the marker's syntax changed?"
    problems = [p for p in map(blocks.unrunnable, every) if p]
    assert not problems, problems


def test_a_skip_without_a_reason_or_a_block_is_refused(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("<!-- doctest: skip -->\n```sh\npterun run\n```\n")
    with pytest.raises(blocks.MarkdownError, match="skip \\(reason\\)"):
        blocks.blocks(page)
    page.write_text("<!-- doctest: skip (needs a GPU) -->\ntext\n```sh\npterun run\n```\n")
    with pytest.raises(blocks.MarkdownError, match="right before a code block"):
        blocks.blocks(page)
    page.write_text("```\n$ pterun run\n```\n")
    with pytest.raises(blocks.MarkdownError, match="needs a language"):
        blocks.blocks(page)
    page.write_text("```sh\npip install pterun\n```\n")
    (block,) = blocks.blocks(page)
    assert "neither pterun nor python" in blocks.unrunnable(block)


HINT = "(a block that cannot run here is marked `<!-- doctest: skip (reason) -->` on the line before it)"


def _run_python(block: blocks.Block, namespace: dict) -> None:
    # Padded so that a traceback's line numbers are the Markdown file's.
    exec(compile("\n" * block.line + block.code, str(block.path), "exec"), namespace)


def _run_commands(block: blocks.Block, cwd) -> None:
    for command in block.commands():
        if command[0] == "pterun":
            result = CliRunner().invoke(app, command[1:], catch_exceptions=False)
            assert result.exit_code == 0, (
                f"{block.where}: `{' '.join(command)}` exited {result.exit_code} {HINT}:\n{result.output}")
        else:
            done = subprocess.run([sys.executable, *command[1:]], cwd=cwd, capture_output=True, text=True, timeout=300)
            assert done.returncode == 0, (
                f"{block.where}: `{' '.join(command)}` failed {HINT}:\n{done.stdout}{done.stderr}")


@pytest.mark.parametrize("page", RUNNABLE_PAGES, ids=lambda p: str(p.relative_to(blocks.ROOT)))
def test_page_runs(page, doc_files, tmp_path, monkeypatch):
    runnable = [b for b in blocks.blocks(page) if b.runs]
    assert runnable, f"{page}: no block runs here: no premise"
    cwd = tmp_path / "cwd"
    shutil.copytree(doc_files, cwd)
    monkeypatch.chdir(cwd)
    runtime = pterun.Runtime()
    monkeypatch.setattr(pterun.Runtime, "get", staticmethod(lambda: runtime))
    namespace = {"__name__": "__doc_snippet__", "x": example_input()}
    for block in runnable:
        if block.lang in blocks.PYTHON:
            _run_python(block, namespace)
        else:
            _run_commands(block, cwd)
