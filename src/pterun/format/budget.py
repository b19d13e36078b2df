"""Bounded reads: every element a reader takes from a flatbuffer is counted against the buffer's size.

A verified program cannot exceed the budget (the verifier bounds the same
walk); an unverified one (Verification.Minimal) whose vectors are shared over
and over would otherwise keep the reader busy for time quadratic in its size.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from contextvars import ContextVar

from pterun.errors import InvalidProgram
from pterun.flatbuf.verify import DATA_PER_BYTE

# Elements the enclosing read may still take; None outside any read_budget.
_READ_BUDGET: ContextVar[list[int] | None] = ContextVar("_READ_BUDGET", default=None)


@contextmanager
def read_budget(buffer_size: int):
    """Bounds the elements read inside the block to DATA_PER_BYTE per byte of the buffer."""
    token = _READ_BUDGET.set([DATA_PER_BYTE * buffer_size])
    try:
        yield
    finally:
        _READ_BUDGET.reset(token)


def charge(n: int) -> int:
    """Counts ``n`` elements against the budget of the enclosing ``read_budget``; returns ``n``."""
    left = _READ_BUDGET.get()
    if left is not None:
        left[0] -= n
        if left[0] < 0:
            raise InvalidProgram(
                f"the program's vectors and strings, as read, add up to more than {DATA_PER_BYTE} "
                f"elements per byte of it (data shared over and over)"
            )
    return n


def string(raw: bytes | None) -> str | None:
    """A string field, charged by its length."""
    if raw is None:
        return None
    charge(len(raw))
    return raw.decode("utf-8")


def ints(length: int, as_numpy: Callable) -> tuple[int, ...]:
    """A vector of integers of ``length`` elements (read by ``as_numpy``), charged by its length."""
    return tuple(int(x) for x in as_numpy()) if charge(length) else ()
