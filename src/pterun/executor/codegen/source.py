"""Python source written from a program: its functions, and a program's names and values made safe in it.

The executor writes each method as Python (generate.py) and, for ``compile=True``, as a pure function
(functional.py); ``make_function`` makes the function, compiled by ``pterun.sourcecode`` under a file name
of its own with its lines in :mod:`linecache`.
"""

from __future__ import annotations

import functools
import keyword
import math
import re
from collections.abc import Callable, Mapping, Sequence

from pterun.executor.cache import LoadCache
from pterun.sourcecode import define, keep_lines


def make_function(kind: str, name: str, body: Sequence[str], env: Mapping[str, object],
                  cache: LoadCache | None = None) -> tuple[Callable, str, str]:
    """Compiles ``body`` (lines defining ``run`` at one level of indentation, reading the names in ``env``),
    or takes the code compiled from the same source from ``cache``.

    Returns ``(run, source, filename)``; source line 1 is the header that binds ``env``'s names.
    """
    names = sorted(env, key=_natural)
    source = "\n".join([f"def __make({', '.join(names)}):", *body, "    return run", ""])
    make, filename = define(kind, name, source, {}, "__make", cache.code if cache is not None else None)
    run = make(*(env[n] for n in names))
    keep_lines(filename, source, run)
    return run, source, filename


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
