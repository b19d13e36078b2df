"""Functions made from generated Python source, and tracebacks read back to the lines that raised.

The executor writes each method as Python (its own code and, for ``compile=True``, a pure function), and the
XNNPACK backend writes each delegate graph as Python. All of them are compiled here, under a file name of their
own, "<pterun method 'forward' #12>" (or, when the code may come from a cache, named after its source:
"<pterun method 'forward' 3f2a...>"), whose source is registered with :mod:`linecache` for as long as a function
compiled under that name lives, so:

* tracebacks and debuggers show the generated lines (``inspect.getsource`` works on them);
* an error is mapped back to what its line computes by file name and line (``raising_line``), even when two
  programs in one process both have a method named "forward";
* ``torch.compile`` traces the function's own frame: a function with no source file would be wrapped in a frame
  shared by every such function, whose recompilation limit (8) would silently stop compiling the ninth method a
  process loads.

This is a module of its own, beside ``core`` and ``format`` in the layers (pyproject.toml): it needs only the
standard library, and both the executor and the backends (a layer below the executor) make functions with it.
"""

from __future__ import annotations

import hashlib
import itertools
import linecache
import threading
import weakref
from collections.abc import Callable
from types import CodeType

CompileCode = Callable[[str, str], CodeType]  # (source, file name) -> code, e.g. a cache's

_serial = itertools.count(1)


def define(kind: str, name: str, source: str, namespace: dict, entry: str,
           compile_code: CompileCode | None = None) -> tuple[Callable, str]:
    """Runs ``source`` in ``namespace`` and returns ``(namespace[entry], file name)``.

    Without ``compile_code`` the file name is unique in the process; with it (code that may be read back from a
    cache) it is named after the source, so that code compiled earlier already carries its name. Call
    :func:`keep_lines` with the function the caller keeps."""
    if compile_code is None:
        filename = f"<pterun {kind} {name!r} #{next(_serial)}>"
        code = compile(source, filename, "exec")
    else:
        filename = f"<pterun {kind} {name!r} {hashlib.sha256(source.encode()).hexdigest()[:16]}>"
        code = compile_code(source, filename)
    exec(code, namespace)  # noqa: S102 - generated source: names from a file reach it only as checked identifiers
    return namespace[entry], filename


def keep_lines(filename: str, source: str, function: Callable) -> None:
    """Registers ``source`` with linecache under ``filename`` while ``function`` lives."""
    _lines.hold(filename, source, function)


def raising_line(traceback, filename: str) -> int | None:
    """The line of ``filename`` that raised: the innermost frame of that file in ``traceback``."""
    line = None
    while traceback is not None:
        if traceback.tb_frame.f_code.co_filename == filename:
            line = traceback.tb_lineno
        traceback = traceback.tb_next
    return line


class _Lines:
    """linecache entries of generated functions, each kept while a function compiled under its name lives
    (functions of the same source share a name).

    A function's death is noted without waiting for the lock: the collector can run its finalizer in the
    middle of ``hold``, in the thread that holds the lock. What cannot be settled then is settled by the
    next ``hold``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._holders: dict[str, int] = {}
        self._dead: list[str] = []  # names of functions that died, not yet counted off

    def hold(self, filename: str, source: str, function: Callable) -> None:
        with self._lock:
            self._settle()
            linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
            self._holders[filename] = self._holders.get(filename, 0) + 1
        weakref.finalize(function, self._release, filename)

    def _release(self, filename: str) -> None:
        self._dead.append(filename)
        if self._lock.acquire(blocking=False):
            try:
                self._settle()
            finally:
                self._lock.release()

    def _settle(self) -> None:
        while self._dead:
            filename = self._dead.pop()
            left = self._holders.pop(filename, 1) - 1
            if left:
                self._holders[filename] = left
            else:
                linecache.cache.pop(filename, None)


_lines = _Lines()
