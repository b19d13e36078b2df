"""Whole-method CUDA graphs: capture a method's compiled function once, replay it on every call.

A method on a GPU launches one kernel per instruction; for small inputs the
launches, not the kernels, take the time. Replaying a captured graph launches
them all at once. The first call with a new set of input shapes runs eagerly
(which also warms up the libraries the kernels use); the next call with the
same shapes captures, and later calls replay. With ``compile=True`` a call that
compiles runs eagerly too, never inside a capture, and the next one captures
the compiled code. Planned inputs are already in
the method's arenas, which the graph reads in place. An input the caller
passes by reference is read where it is when the caller passed the same
tensor to the first two calls (weights, or a buffer the caller refills), and
otherwise copied into a buffer of the graph's before each replay; a bound
input that later arrives in other memory is copied from then on.

A graph is kept per set of input shapes, the few used last (``KEPT``): a call with other shapes runs eagerly
(setting every tensor's shape for the new sizes) and is captured once those shapes come twice in a row, and a
call with shapes a kept graph holds replays it at once. A language model's prompt and its one-token steps
alternate: with one graph, every generation ran its first step eagerly and captured it again (on an H100,
about a quarter of a 100M decoder's decode time); with one per shape, the step's graph outlives the prompt.
Methods whose instructions synchronize with the host (control flow, reading a tensor's value into a Python
number) cannot be captured and always run eagerly.

With ``compile=True`` the plain code may be the faster one (codegen/torch_compile.py). Where a replay changes nothing
a later call reads, the loader gives the runner the plain code too (``plain``): the first capture of each set of
shapes captures both, times their replays (``RACE``, interleaved, on the inputs of that call) and keeps the graph
``keep_plain`` chooses; the other is released. Replays afterwards are as without the race.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

import torch

_NOTHING = object()
KEPT = 4  # graphs kept, one per set of input shapes; the least recently replayed goes first
RACE = 5, 4  # rounds, and replays of each graph a round, when the compiled and the plain code's graphs are timed


@dataclass
class Captured:
    """One captured graph and what it reads and writes."""

    graph: torch.cuda.CUDAGraph
    pool: Any  # torch.cuda.graph_pool_handle(): an opaque token, the graph's own memory
    static: list  # the arguments it was captured with: the caller's where bound, else buffers it reads
    bound: list[bool]  # per argument: read in place
    outputs: tuple  # the graph's (read only while it is held)
    geometry: list  # per output tensor: its sizes, strides and offset as captured (None: not a tensor)


class CudaGraphRunner:
    def __init__(self, run: Callable, device: torch.device, shape_tensors: Sequence = (), keyed: bool = False,
                 compiles: Callable[[Sequence], bool] | None = None,
                 replayed: Callable[[tuple], None] | None = None, plain: Callable | None = None,
                 keep_plain: Callable[[Any, float, float], bool] | None = None) -> None:
        """``keyed``: some input can change shape, so a graph holds one set of shapes (of the arguments and of
        ``shape_tensors``, the planned dynamic inputs). ``compiles(args)``: whether calling ``run`` with
        ``args`` would compile it (``compile=True``); such a call runs eagerly, never inside a capture.
        ``replayed(shapes)``: told the arguments' shapes of each replay, a call ``run`` does not see. ``plain``:
        the method's plain code, taking and returning what ``run`` does, raced against ``run`` at each set of
        shapes' first capture; ``keep_plain(key, run's ms, plain's ms)`` says which graph is kept."""
        self.run = run
        self.plain, self.keep_plain = plain, keep_plain
        self.chosen: dict[Any, Callable] = {}  # per shape key raced: the code its graphs capture
        self.compiles = compiles
        self.replayed = replayed
        self.device = device
        self.shape_tensors = shape_tensors
        self.keyed = keyed
        self.graphs: OrderedDict[Any, Captured] = OrderedDict()  # by shape key, the last used last
        self.current: Captured | None = None  # what the last call replayed or captured (None: it ran eagerly)
        self.seen = _NOTHING  # the shapes of the last eager call (None is a key: a method of static shapes)
        self.failure: Exception | None = None
        self.replaying = False
        self.copy_always: set[int] = set()
        self.previous: list[int] = []
        self.shapes = _NOTHING  # the shapes the method's tensors were last given (an eager call's, a graph's)

    @property
    def graph(self) -> torch.cuda.CUDAGraph | None:
        """The graph the last call replayed or captured; None where it ran eagerly."""
        return self.current.graph if self.current is not None else None

    @property
    def bound(self) -> list[bool]:
        """Per argument of that graph: whether it reads the caller's tensor in place."""
        return self.current.bound if self.current is not None else []

    def shape_key(self, args: Sequence):
        """What a graph is captured for: the input shapes of this call (None: a method whose inputs cannot
        change shape)."""
        if not self.keyed:
            return None
        return (tuple(a.shape for a in args if isinstance(a, torch.Tensor)),
                tuple(t.shape for t in self.shape_tensors))

    def call(self, args: Sequence, precision: AbstractContextManager) -> tuple:
        """A call's outputs: a replay when a graph holds this call, else run eagerly or captured, under the
        call's ``precision``."""
        outputs = self.replay(args)
        return outputs if outputs is not None else self.run_or_capture(args, precision)

    def run_or_capture(self, args: Sequence, precision: AbstractContextManager) -> tuple:
        """A call no kept graph replays (``replay`` said None): run eagerly, or captured, under ``precision``."""
        with precision:
            return self(args, self.shape_key(args))

    def replay(self, args: Sequence) -> tuple | None:
        """The outputs of a replay if a graph holds this call (its shapes, bound inputs in place), else None.

        A replay runs the captured kernels as captured: the precision switches and autocast state a call
        runs under were read at capture and do not apply, so the caller need not set them; nor does it run
        an operator on the CPU, so the caller need not set a thread count either."""
        key = self.shape_key(args)
        captured = self.graphs.get(key)
        if captured is None or not self._feed(captured, args):
            return None
        return self._replay(captured, key)

    def _replay(self, captured: Captured, key) -> tuple:
        self.graphs.move_to_end(key)
        captured.graph.replay()
        if self.replayed is not None and key is not None:
            self.replayed(key[0])
        if key != self.shapes:
            # An eager call with other shapes resized the planned outputs the graph writes: they get back the
            # geometry the graph's kernels write them in.
            for out, geometry in zip(captured.outputs, captured.geometry):
                if geometry is not None and (out.shape, out.stride(), out.storage_offset()) != geometry:
                    out.as_strided_(*geometry)
            self.shapes = key
        self.current, self.replaying = captured, True
        return captured.outputs

    def __call__(self, args: Sequence, key) -> tuple:
        if self.failure is None:
            captured = self.graphs.get(key)
            if captured is not None:
                if self._feed(captured, args):
                    return self._replay(captured, key)
                del self.graphs[key]  # a bound input moved: run eagerly, capture again on the next call
            elif key == self.seen and (self.compiles is None or not self.compiles(args)):
                return self._capture(args, key)
            self.seen = key
            self.previous = self._pointers(args)
        self.current, self.replaying, self.shapes = None, False, key
        return self.run(*args)

    @staticmethod
    def _pointers(args: Sequence) -> list[int]:
        return [a.data_ptr() if isinstance(a, torch.Tensor) else 0 for a in args]

    def _feed(self, captured: Captured, args: Sequence) -> bool:
        """Puts the inputs where the graph reads them; False if a bound input moved (recapture)."""
        for i, (static, arg) in enumerate(zip(captured.static, args)):
            if not isinstance(static, torch.Tensor):
                continue
            if captured.bound[i]:
                if arg.data_ptr() != static.data_ptr():
                    self.copy_always.add(i)
                    return False
            else:
                static.copy_(arg)
        return True

    def _capture(self, args: Sequence, key) -> tuple:
        # Inputs that came at the same address twice are bound (read in place), others copied.
        bound = [isinstance(a, torch.Tensor) and i not in self.copy_always and a.data_ptr() == self.previous[i]
                 for i, a in enumerate(args)]
        static = [a if b else (_twin(a) if isinstance(a, torch.Tensor) else a) for a, b in zip(args, bound)]
        run = self.chosen.get(key, self.run)
        try:
            captured = self._record(run, static, bound)
        except Exception as exc:  # noqa: BLE001 - a method that cannot be captured runs eagerly
            self.failure = exc
            self.current, self.replaying, self.shapes = None, False, key
            return self.run(*args)
        if self.plain is not None and key not in self.chosen:
            captured = self._race(captured, static, bound, key)
        self.shapes = key
        self.graphs[key] = captured
        while len(self.graphs) > KEPT:
            self.graphs.popitem(last=False)
        for s, arg, b in zip(static, args, bound):
            if isinstance(s, torch.Tensor) and not b:
                s.copy_(arg)
        return self._replay(captured, key)

    def _record(self, run: Callable, static: list, bound: list[bool]) -> Captured:
        """``run`` captured on ``static``; raises what the capture raised, the generators left working."""
        graph = torch.cuda.CUDAGraph()
        torch.cuda.synchronize(self.device)
        # A pool of its own per graph: a dropped graph's pool is released with it, and PyTorch's allocator
        # refuses a capture into a released pool (an internal assert, which left the method eager).
        pool = torch.cuda.graph_pool_handle()
        try:
            with torch.cuda.graph(graph, pool=pool):
                outputs = run(*static)
        except Exception:
            torch.cuda.synchronize(self.device)
            _end_generators_capture(self.device)
            raise
        geometry = [(o.shape, o.stride(), o.storage_offset()) if isinstance(o, torch.Tensor) else None
                    for o in outputs]
        return Captured(graph, pool, static, bound, outputs, geometry)

    def _race(self, compiled: Captured, static: list, bound: list[bool], key) -> Captured:
        """The compiled code's graph, or the plain code's where ``keep_plain`` prefers it after timing both."""
        assert self.plain is not None and self.keep_plain is not None, "a race needs the plain code and a judge"
        self.chosen[key] = self.run
        try:
            self.plain(*static)  # once outside a capture: the plain code's kernels load and its libraries start
            plain = self._record(self.plain, static, bound)
        except Exception:  # noqa: BLE001 - the plain code cannot be captured: the compiled graph stays
            return compiled
        compiled_ms, plain_ms = replay_ms((compiled.graph, plain.graph), self.device)
        kept, dropped = compiled, plain
        if self.keep_plain(key, compiled_ms, plain_ms):
            kept, dropped = plain, compiled
            self.chosen[key] = self.plain
        dropped.graph.reset()
        return kept


def replay_ms(graphs: Sequence[torch.cuda.CUDAGraph], device: torch.device) -> list[float]:
    """Each graph's median time a replay, ms: rounds of back-to-back replays, the graphs interleaved (``RACE``)."""
    rounds, replays = RACE
    times: list[list[float]] = [[] for _ in graphs]
    for _ in range(rounds):
        for graph, timed in zip(graphs, times):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(replays):
                graph.replay()
            end.record()
            end.synchronize()
            timed.append(start.elapsed_time(end) / replays)
    torch.cuda.synchronize(device)
    return [sorted(timed)[len(timed) // 2] for timed in times]


def _twin(tensor: torch.Tensor) -> torch.Tensor:
    """A copy the graph reads its input from: an inference tensor where the caller's is one, else not, since
    compiled code (``compile=True``) is guarded on the difference and would compile again inside the capture."""
    with torch.inference_mode(tensor.is_inference()):
        return tensor.clone()


def _end_generators_capture(device: torch.device) -> None:
    """Clears what a failed capture leaves on PyTorch's CUDA random generators of ``device``.

    A capture marks them as capturing and only a capture that ends well unmarks them (PyTorch ends the
    generators' part after the stream's): after one that failed, every random op on the device raises
    "Offset increment outside graph capture", in the caller's code as much as in the program's. A small
    capture that ends well unmarks them."""
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.device(device), torch.cuda.graph(graph, pool=torch.cuda.graph_pool_handle()):
        torch.zeros(1, device=device).add_(1)
    graph.reset()
