"""What a call does in Python, counted: every function it enters, Python's and builtins' alike.

A count is not a time, so it can be asserted on a busy machine: a host path that grows by a lookup, a
check or a wrapper grows its count."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable


def calls_made(fn: Callable[[], object]) -> Counter:
    """The functions ``fn()`` entered, by name (Python functions as ``file:qualname``, builtins by name); ``fn``
    itself not counted."""
    made: Counter = Counter()
    outer = fn.__code__ if hasattr(fn, "__code__") else None

    def count(frame, event, arg) -> None:
        if event == "call":
            if frame.f_code is outer and frame.f_back is not None and frame.f_back.f_code is calls_made.__code__:
                return
            code = frame.f_code
            made[f"{code.co_filename.rsplit('/', 1)[-1]}:{code.co_qualname}"] += 1
        elif event == "c_call":
            made[getattr(arg, "__qualname__", repr(arg))] += 1

    sys.setprofile(count)
    try:
        fn()
    finally:
        sys.setprofile(None)
    made["setprofile"] -= 1  # the call that ends the count
    return +made
