"""How the command line shows text and errors.

Names printed by the CLI come from files (method, operator, backend and tensor names, and the error
messages that quote them), and a file is untrusted: a name may hold Rich markup (``[/bold]``) or
terminal escape sequences. Every such string goes through :func:`esc` (or :func:`visible` where Rich
does not parse markup), which shows control characters as escapes and escapes markup.

A user's mistake (a missing file, a bad option, a program that fails) is one ``error: ...`` line on
stderr and exit status 1; ``--debug`` (or ``PTERUN_DEBUG=1``) shows the traceback instead.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import typer
from rich.console import Console
from rich.markup import escape
from rich.text import Text

from pterun.errors import PteError

console = Console()
errors = Console(stderr=True)


class UserError(Exception):
    """A mistake in how the command was called, said in one line naming the file or option."""


class _State:
    debug = False


state = _State()


def visible(text: object, *, lines: bool = False) -> str:
    """``text`` with control and other unprintable characters written as escapes (``\\x1b``).

    ``lines`` keeps newlines and tabs (source code); otherwise the result is one line.
    """
    text = str(text)
    if text.isprintable():
        return text
    return "".join(
        ch if ch.isprintable() or (lines and ch in "\n\t") else ch.encode("unicode_escape").decode("ascii")
        for ch in text
    )


def esc(text: object) -> str:
    """``text`` safe inside a Rich markup string: escaped markup, visible control characters."""
    return escape(visible(text))


def first_line(exc: BaseException) -> str:
    """An exception as ``Type: first line of its message``."""
    message = str(exc).strip().split("\n")[0]
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


@contextmanager
def reported() -> Iterator[None]:
    """Runs a command's body, reporting what goes wrong in one line (unless ``--debug``)."""
    try:
        yield
    except (typer.Exit, typer.Abort, KeyboardInterrupt):
        raise
    except (PteError, UserError) as error:
        if state.debug:
            raise
        fail(str(error))
    except Exception as error:  # noqa: BLE001 - a bug: still one line, the traceback on request
        if state.debug:
            raise
        fail(f"unexpected {first_line(error)} (run with --debug or PTERUN_DEBUG=1 for the traceback)")


def fail(message: str) -> None:
    errors.print(Text.assemble(("error:", "bold red"), " ", visible(message)), soft_wrap=True, highlight=False)
    raise typer.Exit(1)
