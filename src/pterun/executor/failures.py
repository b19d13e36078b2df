"""An exception raised inside a method's code, mapped back to the instruction that raised it.

Every line of the generated function belongs to one instruction (codegen.py),
and its file name is its own (source.py), so the traceback says which
instruction failed even when two programs have a method of the same name.
"""

from __future__ import annotations

from collections.abc import Sequence

from pterun.errors import Internal, InvalidArgument, PteError
from pterun.executor.codegen import CompiledMethod
from pterun.executor.steps import describe


def failing_step(compiled: CompiledMethod, tb) -> int | None:
    """The instruction whose line raised, from a traceback through the compiled function."""
    step = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == compiled.filename:
            step = compiled.lines.get(tb.tb_lineno, step)
        tb = tb.tb_next
    return step


def translate(exc: Exception, compiled: CompiledMethod, steps: Sequence, where: str) -> PteError:
    """``exc`` as a PteError naming the instruction and operator that raised it: ``InvalidArgument`` for what
    a caller's inputs can cause, ``Internal`` for anything else (a check missing at load)."""
    step = failing_step(compiled, exc.__traceback__)
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
