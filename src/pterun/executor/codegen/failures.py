"""An exception raised inside a method's code, mapped back to the instruction that raised it.

Every line of the generated function belongs to one instruction (generate.py),
and its file name is its own (pterun.sourcecode), so the traceback says which
instruction failed even when two programs have a method of the same name.
"""

from __future__ import annotations

from collections.abc import Sequence

from pterun.errors import Internal, InvalidArgument, PteError
from pterun.executor.codegen.generate import GeneratedMethod
from pterun.executor.load.steps import describe
from pterun.sourcecode import raising_line


def failing_step(generated: GeneratedMethod, tb) -> int | None:
    """The instruction whose line raised, from a traceback through the generated function."""
    line = raising_line(tb, generated.filename)
    return generated.lines.get(line) if line is not None else None


def as_pte_error(exc: Exception, generated: GeneratedMethod, steps: Sequence, where: str) -> PteError:
    """``exc`` as a PteError naming the instruction and operator that raised it: ``InvalidArgument`` for what
    a caller's inputs can cause, ``Internal`` for anything else (a check missing at load)."""
    step = failing_step(generated, exc.__traceback__)
    if step is not None:
        what = describe(steps[step]) if steps[step] is not None else "folded"
        where = f"{where} instruction {step} ({what})"
    if isinstance(exc, PteError):
        return type(exc)(f"{where}: {exc.message}")
    if isinstance(exc, (RuntimeError, ValueError, TypeError, IndexError)):
        message = str(exc).split("\n")[0]
        if "not resizable" in message:  # torch's words for a storage that cannot grow
            message = "a result needs more memory than its planned upper bound"
        return InvalidArgument(f"{where}: {message}")
    return Internal(f"{where}: {type(exc).__name__}: {exc}")
