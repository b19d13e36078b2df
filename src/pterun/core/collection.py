"""Python's cyclic garbage collector held off while a program or a method loads.

A load makes tens of thousands of objects that live until it ends (the plan's values, the steps, each pass's
analysis). CPython counts every one that outlives a young collection towards its next full collection, which
walks every object of the process: after ``import torch`` about 170,000, 75-125 ms a walk on a 2-core EPYC. So
a load paid a full walk now and then: loading the bench ViT forty times took 17.5 ms at the median and 28-31 ms
on average, up to 158 ms, where the same loads with the collector held off took 19-20 ms on average and never
more than 29 ms (``bench/load.py`` reports the mean too). ExecuTorch's loads make no Python object, so they
never pay it.

Held off, the objects a load frees are freed by their reference counts as ever; only cycles wait for the
collector's next run after the load. The collector is restored to what it was when the first of the loads
running in the process began (on, unless the process had turned it off) once the last of them ends; a load
inside a load (a program nested in a delegate's blob) holds it off once.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

_lock = threading.Lock()
_loads = 0  # loads running now, in every thread
_resume = False  # whether the collector was on when the first of them began


@contextlib.contextmanager
def collector_held_off() -> Iterator[None]:
    global _loads, _resume
    with _lock:
        if _loads == 0:
            _resume = gc.isenabled()
            gc.disable()
        _loads += 1
    try:
        yield
    finally:
        with _lock:
            _loads -= 1
            if _loads == 0 and _resume:
                gc.enable()
