"""The code blocks of the README and the docs pages, as the doc tests run them.

A fenced block tagged ``python`` is run as Python; one tagged ``sh``, ``bash``, ``shell`` or ``console`` is a
list of commands (in ``console`` blocks, the lines after a ``$`` prompt; the rest is their output). A block
that cannot run here carries a reason on the line before it::

    <!-- doctest: skip (needs a CUDA device) -->
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PYTHON = {"python", "py"}
SHELL = {"sh", "bash", "shell", "console"}
FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+|~~~+)\s*(?P<lang>[\w+-]*)")
MARKER = re.compile(r"^\s*<!--\s*doctest:(?P<body>.*?)-->\s*$")
SKIP = re.compile(r"^\s*skip\s*\((?P<reason>[^)]*\S[^)]*)\)\s*$")
COMMANDS = ("pterun", "python")  # what a shell block may run


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    skip: str | None  # the reason, when marked skip

    @property
    def where(self) -> str:
        path = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
        return f"{path}:{self.line}"

    @property
    def runs(self) -> bool:
        return self.skip is None and self.lang in PYTHON | SHELL

    def commands(self) -> list[list[str]]:
        """A shell block's commands, each split as the shell would (comments dropped)."""
        lines = self.code.splitlines()
        if self.lang == "console":
            lines = [line[2:] for line in lines if line.startswith("$ ")]
        return [shlex.split(line, comments=True) for line in lines if shlex.split(line, comments=True)]


class MarkdownError(ValueError):
    pass


def pages() -> list[Path]:
    """README.md and every page under docs/."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of ``path`` in order; a malformed marker or an untagged block of commands is an error."""
    found: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    pending: tuple[int, str] | None = None  # a skip marker waiting for its block
    i = 0
    while i < len(lines):
        line = lines[i]
        marker = MARKER.match(line)
        if marker:
            skip = SKIP.match(marker.group("body"))
            if skip is None:
                raise MarkdownError(f"{path.name}:{i + 1}: a doctest marker is `<!-- doctest: skip (reason) -->`, "
                                    f"found {line.strip()!r}")
            pending = (i + 1, skip.group("reason").strip())
            i += 1
            continue
        fence = FENCE.match(line)
        if fence is None:
            if line.strip() and pending:
                raise MarkdownError(f"{path.name}:{pending[0]}: a skip marker must come right before a code block")
            i += 1
            continue
        indent, close = len(fence.group("indent")), fence.group("fence")
        end = i + 1
        while end < len(lines) and not lines[end].strip().startswith(close):
            end += 1
        code = "\n".join(line[indent:] for line in lines[i + 1:end])
        lang = fence.group("lang").lower()
        if not lang and any(line.lstrip().startswith(("$ ", "pterun ")) for line in code.splitlines()):
            raise MarkdownError(f"{path.name}:{i + 1}: a block of commands needs a language (console, sh)")
        found.append(Block(path, i + 1, lang, code + "\n", pending[1] if pending else None))
        pending = None
        i = end + 1
    if pending:
        raise MarkdownError(f"{path.name}:{pending[0]}: a skip marker must come right before a code block")
    return found


def unrunnable(block: Block) -> str | None:
    """Why a block not marked skip cannot run (a command other than pterun's or Python's), or None."""
    if block.skip is not None or block.lang not in SHELL:
        return None
    for command in block.commands():
        if command[0] not in COMMANDS:
            return (f"{block.where}: `{shlex.join(command)}` is neither pterun nor python: mark the block skip, "
                    f"with a reason")
    return None
