"""Progress of the commands' long steps (loading, compiling, warm-up, timed or profiled runs).

It is drawn on stderr, and only when stderr is a terminal: output that is piped, captured or asked for as
``--json`` holds none of it, and the lines vanish once the step is over.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, Task, TextColumn, TimeElapsedColumn
from rich.text import Text

from pterun.cli import report


class _Count(MofNCompleteColumn):
    """``done/total`` for a counted step, nothing for the others."""

    def render(self, task: Task) -> Text:
        return super().render(task) if task.fields.get("counted") else Text("")


class Steps:
    """One line per step: a spinner for a step of unknown length, a bar for a counted one."""

    def __init__(self, progress: Progress) -> None:
        self._progress = progress

    @contextmanager
    def step(self, text: str) -> Iterator[None]:
        task = self._progress.add_task(text, total=None, counted=False)
        yield
        self._progress.update(task, total=1, completed=1)

    def counted(self, text: str, total: int) -> Callable[[], None]:
        """A bar of ``total`` units; the returned function advances it by one."""
        task = self._progress.add_task(text, total=total, counted=True)
        return lambda: self._progress.advance(task)


@contextmanager
def steps() -> Iterator[Steps]:
    console = report.errors
    # stdout stays where it is: a redirected stdout would land on stderr while the bars are drawn.
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), _Count(),
                  TimeElapsedColumn(), console=console, transient=True, redirect_stdout=False,
                  disable=not console.is_terminal) as progress:
        yield Steps(progress)


def running(compile: bool) -> str:
    """The label of a method's first runs: with ``compile=True`` the first call compiles."""
    return "runs (the first compiles)" if compile else "runs"
