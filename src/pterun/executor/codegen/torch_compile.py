"""A method's functional form under ``torch.compile``, and the truth about whether it was compiled.

``torch.compile`` fails quietly in more than one way: a graph break splits the
function, a recompilation limit or the process-wide budget of compiled frames
(``torch._dynamo.config.accumulated_recompile_limit``) makes Dynamo run the
function as plain Python, and a backend error raises from the first call.
:class:`CompiledFunction` compiles with ``fullgraph=True`` (a graph break is an
error, not a split) and afterwards checks that Dynamo holds compiled code for
the function's own frame. When it does not, or compiling failed, calls run
uncompiled and ``status`` says why.

A call that runs uncompiled runs the method's own generated code where the
loader gives it (``plain``): it is the functional form's operators with the
results written into planned memory, fused where the executor fuses, and so
faster eagerly than the functional form, which allocates every result (a 100M
decoder's 128-token prompt on an H100: 14 ms against 24). Both keep the
method's state in the same planned memory, so calls may alternate between them.

Shapes are static in every compiled graph. A method whose inputs cannot change
shape compiles on its first call. One whose inputs can (a language model's
prompt and its one-token steps) compiles a set of input shapes once it comes
twice in a row, and runs other calls uncompiled: what recurs (the decode
step, a batch size used over and over, a long prompt's equal chunks) is
compiled for exactly its shapes, and what does not costs no compilation. A
prompt's length that comes back between generations is not compiled either: a
compile of a 100M decoder's prompt stalled that generation for 7 s on an H100
(12 s at 1B), for a prompt step of milliseconds; the CUDA graph runner captures
by the same rule (call/graphs.py). The alternative, one graph with symbolic
sizes, spent over a minute in Dynamo's shape reasoning on a two-layer decoder
(docs/benchmarks.md) and still compiled the one-token step again, as sizes of 1
are specialized.

Inductor does not win everywhere: on a GPU, a batch-8 MLP of 256 wide layers compiled to a split-K product of 29 µs
where the plain code's ``addmm`` takes 2.7 (docs/benchmarks.md). Where the method is replayed from CUDA graphs and a
replay changes nothing a later call reads (no state, no input updated, no delegate), each set of shapes is captured
both ways and timed (call/graphs.py), and the plain code's graph is kept where it is clearly faster (``keep_plain``);
``status`` says so, with both times. Its results are then the plain code's, as without ``compile=True``.

Where torch can (2.11 on, Inductor's caches on), each set of shapes is compiled ahead of time and kept in the
load cache (``ahead.py``): another process reads it back instead of tracing the method again. Elsewhere
``torch.compile``'s own path compiles it, and Dynamo's cache of the function's frame holds the code.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from pterun.executor.cache import LoadCache
from pterun.executor.codegen.ahead import Ahead, compile_ahead

COMPILED = "compiled"
PLAIN_KEPT = "compiled; its plain code runs instead"  # where its CUDA graph replayed faster (keep_plain)
PLAIN_WINS_BELOW = 0.9  # the plain code's graph is kept when it takes under this share of the compiled one's time
LEFT_UNCOMPILED = "torch.compile ran it uncompiled (its recompilation limits were reached)"
REFUSED = ("compiled; some calls ran uncompiled: the compiled code's guards refused their inputs (other strides or "
           "dtypes, another grad mode)")


def _listed(shapes: tuple) -> str:
    return ", ".join(str(list(s)) for s in shapes)


def _entries(fn: Callable) -> int:
    from torch._C._dynamo.eval_frame import _debug_get_cache_entry_list

    return len(_debug_get_cache_entry_list(fn.__code__))


def _shapes(args: Sequence) -> tuple:
    return tuple(a.shape for a in args if isinstance(a, torch.Tensor))


class CompiledFunction:
    def __init__(self, functional: Callable, *, dynamic: bool, plain: Callable | None = None, source: str = "",
                 cache: LoadCache | None = None) -> None:
        """``dynamic``: some input can change shape (a set of shapes is compiled once it comes twice in a row).
        ``plain``: what runs a call uncompiled, taking the functional form's arguments and returning its
        results (the functional form itself where None). ``source``: the functional form's generated source,
        which keys its code in the load cache ``cache``."""
        self.functional = functional
        self.uncompiled = functional if plain is None else plain
        self.compiled = torch.compile(functional, dynamic=False, fullgraph=True)
        self.source, self.cache = source, cache
        self.status = COMPILED
        self.dynamic = dynamic
        self.last: tuple | None = None  # the input shapes of the last call
        self.shapes: set[tuple] = set()  # sets of input shapes with compiled code
        self.ahead: dict[tuple, Ahead] = {}  # of those, the ones compiled ahead of time (or read from the cache)
        self.ready = False  # a method of static shapes: compiled
        self._call: Callable = self._by_shapes if dynamic else self._first
        self.timed: dict[tuple | None, tuple[float, float]] = {}  # per graph's key: (compiled, plain) ms a replay

    def __call__(self, *args):
        return self._call(*args)

    @property
    def running(self) -> bool:
        """False once compiling failed or Dynamo left the function uncompiled (calls then run uncompiled)."""
        return not self.status.startswith("not compiled")

    def compiles(self, args: Sequence) -> bool:
        """Whether a call with ``args`` would compile (a CUDA graph is captured only around compiled code)."""
        if not self.running:
            return False
        if not self.dynamic:
            return not self.ready
        key = _shapes(args)
        return key not in self.shapes and key == self.last and self._room()

    def replayed(self, shapes: tuple) -> None:
        """A call a CUDA graph replayed, with tensor inputs of ``shapes``: it counts in "twice in a row" as a call
        of this function does. Without it a prompt's length, run between two generations' one-token steps
        (replayed, so unseen here), came twice in a row and compiled: 3.7 s at a 100M decoder's second
        generation on an H100."""
        self.last = shapes

    def keep_plain(self, key: tuple | None, compiled_ms: float, plain_ms: float) -> bool:
        """Told a replay's time of a CUDA graph of the compiled code and of the plain code, for the graph runner's
        ``key`` (the input shapes; None: a method of static shapes): whether the plain code's graph is kept. The
        compiled code, what the caller asked for, keeps ties and near ties."""
        self.timed[key] = (compiled_ms, plain_ms)
        if plain_ms >= compiled_ms * PLAIN_WINS_BELOW:
            return False
        shapes = "" if key is None else f" for inputs of shapes {_listed(key[0])}"
        self.status = (f"{PLAIN_KEPT}{shapes}: replayed from a CUDA graph it took "
                       f"{plain_ms:.3f} ms a call, the compiled code {compiled_ms:.3f} ms")
        return True

    def _room(self) -> bool:
        return len(self.shapes) < torch._dynamo.config.recompile_limit

    def _by_shapes(self, *args):
        key = _shapes(args)
        last, self.last = self.last, key
        if key in self.shapes:
            ahead = self.ahead.get(key)
            return self.compiled(*args) if ahead is None else self._run_ahead(ahead, args)
        if key != last or not self._room():
            return self.uncompiled(*args)
        before = _entries(self.functional)
        outputs = self._compile(args)
        if self.running:
            if key not in self.ahead and _entries(self.functional) <= before:
                self._give_up(LEFT_UNCOMPILED, None)
            else:
                self.shapes.add(key)
                if not self._room():
                    sets = f"{len(self.shapes)} set{'s' if len(self.shapes) > 1 else ''}"
                    self.status = (f"compiled for {sets} of input shapes, torch.compile's recompile_limit; "
                                   "calls with other shapes run uncompiled")
        return outputs

    def _first(self, *args):
        outputs = self._compile(args)
        if self.running:
            key = _shapes(args)
            ahead = self.ahead.get(key)
            if ahead is None and _entries(self.functional) == 0:
                self._give_up(LEFT_UNCOMPILED, None)
            else:
                self.ready = True
                self.shapes.add(key)
                self._call = self.compiled if ahead is None else lambda *a: self._run_ahead(ahead, a)
        return outputs

    def _run_ahead(self, ahead: Ahead, args: Sequence):
        if ahead.check(*args):
            return ahead.run(*args)
        # The guards torch saved with the code refused the call (inputs of other strides or dtypes, another grad
        # mode): it runs uncompiled rather than through code compiled for other inputs, and the status says so.
        if self.status == COMPILED:
            self.status = REFUSED
        return self.uncompiled(*args)

    def _compile(self, args: Sequence):
        try:
            ahead = compile_ahead(self.functional, args, self.source, self.cache)
            if ahead is not None:
                self.ahead[_shapes(args)] = ahead
                return self._run_ahead(ahead, args)
            return self.compiled(*args)
        except (torch._dynamo.exc.TorchDynamoException, torch._dynamo.exc.FailOnRecompileLimitHit) as exc:
            # Dynamo's and the backend's errors; the kernels' own errors raise again from the plain call.
            first = (str(exc).splitlines() or [""])[0]
            return self._give_up(f"torch.compile failed: {type(exc).__name__}: {first}", args)

    def _give_up(self, why: str, args):
        self.status = f"not compiled: {why}"
        self._call = self.uncompiled
        return None if args is None else self.uncompiled(*args)
