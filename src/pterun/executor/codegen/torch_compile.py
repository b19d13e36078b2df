"""A method's functional form under ``torch.compile``, and the truth about whether it was compiled.

``torch.compile`` fails quietly in more than one way: a graph break splits the
function, a recompilation limit or the process-wide budget of compiled frames
(``torch._dynamo.config.accumulated_recompile_limit``) makes Dynamo run the
function as plain Python, and a backend error raises from the first call.
:class:`CompiledFunction` compiles with ``fullgraph=True`` (a graph break is an
error, not a split), compiles on the first call, and afterwards checks that
Dynamo holds compiled code for the function's own frame. When it does not, or
compiling failed, the functional form runs as plain Python (the same operators,
so the same results) and ``status`` says why.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

COMPILED = "compiled"


def _entries(fn: Callable) -> int:
    from torch._C._dynamo.eval_frame import _debug_get_cache_entry_list

    return len(_debug_get_cache_entry_list(fn.__code__))


class CompiledFunction:
    def __init__(self, functional: Callable, *, dynamic: bool) -> None:
        self.functional = functional
        self.compiled = torch.compile(functional, dynamic=dynamic, fullgraph=True)
        self.status = COMPILED
        self._call = self._first

    def __call__(self, *args):
        return self._call(*args)

    def _first(self, *args):
        try:
            outputs = self.compiled(*args)
        except (torch._dynamo.exc.TorchDynamoException, torch._dynamo.exc.FailOnRecompileLimitHit) as exc:
            # Dynamo's and the backend's errors; the kernels' own errors raise again from the plain call.
            first = (str(exc).splitlines() or [""])[0]
            return self._give_up(f"torch.compile failed: {type(exc).__name__}: {first}", args)
        if _entries(self.functional) == 0:
            self._give_up("torch.compile ran it uncompiled (its recompilation limits were reached)", None)
        else:
            self._call = self.compiled
        return outputs

    def _give_up(self, why: str, args):
        self.status = f"not compiled: {why}"
        self._call = self.functional
        return None if args is None else self.functional(*args)
