"""Functions made at load from generated Python source.

The executor writes each method as Python (codegen.py) and, for
``compile=True``, as a pure function (functional.py). Each is compiled under a
file name of its own, "<pterun method 'forward' #12>" (or, when its code may
come from the load cache, named after its source: "<pterun method 'forward'
3f2a...>"), whose source is registered with :mod:`linecache` for as long as a
function compiled under that name lives, so:

* tracebacks and debuggers show the generated lines (``inspect.getsource``
  works on them);
* an error is mapped back to its instruction by file name and line, even when
  two programs in one process both have a method named "forward";
* ``torch.compile`` traces the function's own frame: a function with no source
  file would be wrapped in a frame shared by every such function, whose
  recompilation limit (8) would silently stop compiling the ninth method a
  process loads.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import keyword
import linecache
import math
import re
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pterun.executor.cache import LoadCache

_serial = itertools.count(1)


def make_function(kind: str, name: str, body: Sequence[str], env: Mapping[str, object],
                  cache: LoadCache | None = None) -> tuple[Callable, str, str]:
    """Compiles ``body`` (lines defining ``run`` at one level of indentation, reading the names in ``env``),
    or takes the code compiled from the same source from ``cache``.

    Returns ``(run, source, filename)``; source line 1 is the header that binds ``env``'s names.
    """
    names = sorted(env, key=_natural)
    source = "\n".join([f"def __make({', '.join(names)}):", *body, "    return run", ""])
    scope: dict[str, Any] = {}
    if cache is None:
        filename = f"<pterun {kind} {name!r} #{next(_serial)}>"
        code = compile(source, filename, "exec")
    else:
        # Named after its source, so that the code read back from the cache has its own name already.
        filename = f"<pterun {kind} {name!r} {hashlib.sha256(source.encode()).hexdigest()[:16]}>"
        code = cache.code(source, filename)
    exec(code, scope)  # noqa: S102 - generated from a checked plan; names, not text
    run = scope["__make"](*(env[n] for n in names))
    _lines.hold(filename, source, run)
    return run, source, filename


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

    def hold(self, filename: str, source: str, run: Callable) -> None:
        with self._lock:
            self._settle()
            linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
            self._holders[filename] = self._holders.get(filename, 0) + 1
        weakref.finalize(run, self._release, filename)

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


@functools.lru_cache(maxsize=1 << 16)
def _natural(name: str) -> list:
    # c2 before c10: numbers compare as numbers (re.split puts them at odd positions, text at even ones).
    return [int(part) if i % 2 else part for i, part in enumerate(re.split(r"(\d+)", name))]


# -- writing values and names from a program into source ------------------------------------------------
#
# A program's names (operators, backends) reach generated source only as identifiers made of ASCII
# letters, digits and underscores, and inside comments only escaped; scalars only as literals Python
# reads back as the same value.


def inline(value) -> bool:
    """Whether a load-time value is written inline as a literal: an immutable scalar whose literal is exact."""
    if value is None or isinstance(value, (bool, int, str)):
        return True
    return isinstance(value, float) and math.isfinite(value)


def literal(value) -> str:
    """The literal of a value ``inline`` accepts (strings escaped to ASCII)."""
    return ascii(value) if isinstance(value, str) else repr(value)


@functools.lru_cache(maxsize=4096)
def kernel_name(operator: str) -> str:
    """An identifier for an operator's kernel: "aten::addmm.out" -> "addmm_out"; other namespaces keep theirs
    ("quantized_decomposed::quantize_per_tensor.out" -> "quantized_decomposed_quantize_per_tensor_out")."""
    namespace, _, rest = operator.partition("::")
    text = f"{namespace}_{rest}" if namespace and namespace != "aten" else rest
    return re.sub(r"\W", "_", text, flags=re.ASCII).strip("_") or "kernel"


# Names the generators use themselves: c3, p3, v3, a3 (a delegate's argument list), f3_1 (a converter),
# x3_1 or x3_dtype (a constant argument), and their helpers. A name made from a program's never is one.
_OWN = re.compile(r"[cpvafx]\d+(_\w+)?|pc|run|_r|_device|_truth|_keep_dim_order|_keep_contiguous|__make")


def bind(env: dict, name: str, value, step: int, *, own: bool = False) -> str:
    """Binds ``value`` in ``env`` under ``name`` if that is free or names the same object, else under a name
    made unique by the step's number. ``own``: a name the generator made (else one made from the program's)."""
    if not own and (not name.isidentifier() or keyword.iskeyword(name) or _OWN.fullmatch(name)):
        name = f"{name}_"
    if env.get(name, value) is not value:
        name = f"{name}_{step}"
    env[name] = value
    return name


def comment(text: str) -> str:
    """``text`` fit for a comment: one line, printable ASCII."""
    return ascii(text)[1:-1]
