"""Functions made at load from generated Python source.

The executor writes each method as Python (codegen.py) and, for
``compile=True``, as a pure function (functional.py). Each is compiled under a
file name of its own, "<pterun method 'forward' #12>", whose source is
registered with :mod:`linecache` for as long as the function lives, so:

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

import itertools
import linecache
import re
import weakref
from collections.abc import Callable, Mapping, Sequence

_serial = itertools.count(1)


def make_function(kind: str, name: str, body: Sequence[str], env: Mapping[str, object]) -> tuple[Callable, str, str]:
    """Compiles ``body`` (lines defining ``run`` at one level of indentation, reading the names in ``env``).

    Returns ``(run, source, filename)``; source line 1 is the header that binds ``env``'s names.
    """
    names = sorted(env, key=_natural)
    source = "\n".join([f"def __make({', '.join(names)}):", *body, "    return run", ""])
    filename = f"<pterun {kind} {name!r} #{next(_serial)}>"
    scope: dict[str, object] = {}
    exec(compile(source, filename, "exec"), scope)  # noqa: S102 - generated from a checked plan; names, not text
    run = scope["__make"](*(env[n] for n in names))
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    weakref.finalize(run, linecache.cache.pop, filename, None)
    return run, source, filename


def _natural(name: str) -> list:
    # c2 before c10: numbers compare as numbers (re.split puts them at odd positions, text at even ones).
    return [int(part) if i % 2 else part for i, part in enumerate(re.split(r"(\d+)", name))]
