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

A new shape invalidates the graph: the call runs eagerly (setting every
tensor's shape for the new sizes) and the graph is captured again once that
shape repeats. Methods whose instructions synchronize with the host (control
flow, reading a tensor's value into a Python number) cannot be captured and
always run eagerly.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import torch

_NOTHING = object()


class CudaGraphRunner:
    def __init__(self, run: Callable, device: torch.device, shape_tensors: Sequence = (), keyed: bool = False,
                 compiles: Callable[[Sequence], bool] | None = None) -> None:
        """``keyed``: some input can change shape, so a graph holds one set of shapes (of the arguments and of
        ``shape_tensors``, the planned dynamic inputs). ``compiles(args)``: whether calling ``run`` with
        ``args`` would compile it (``compile=True``); such a call runs eagerly, never inside a capture."""
        self.run = run
        self.compiles = compiles
        self.device = device
        self.shape_tensors = shape_tensors
        self.keyed = keyed
        self.pool: Any = None  # torch.cuda.graph_pool_handle(): an opaque token
        self.graph: torch.cuda.CUDAGraph | None = None
        self.key = None
        self.seen = _NOTHING  # the shapes of the last eager call (None is a key: a method of static shapes)
        self.static: list = []
        self.outputs: tuple = ()  # the captured graph's (read only while it is held)
        self.failure: Exception | None = None
        self.replaying = False
        self.bound: list[bool] = []
        self.copy_always: set[int] = set()
        self.previous: list[int] = []

    def shape_key(self, args: Sequence):
        """What a graph is captured for: the input shapes of this call (None: a method whose inputs cannot
        change shape)."""
        if not self.keyed:
            return None
        return (tuple(a.shape for a in args if isinstance(a, torch.Tensor)),
                tuple(t.shape for t in self.shape_tensors))

    def call(self, args: Sequence, precision: AbstractContextManager) -> tuple:
        """A call's outputs: a replay when the graph holds this call, else run eagerly or captured, under the
        call's ``precision``."""
        key = self.shape_key(args)
        outputs = self.replay(args, key)
        if outputs is None:
            with precision:
                outputs = self(args, key)
        return outputs

    def replay(self, args: Sequence, key) -> tuple | None:
        """The outputs of a replay if the graph holds this call (its shapes, bound inputs in place), else None.

        A replay runs the captured kernels as captured: the precision switches and autocast state a call
        runs under were read at capture and do not apply, so the caller need not set them."""
        if self.graph is not None and key == self.key and self._feed(args):
            self.graph.replay()
            self.replaying = True
            return self.outputs
        return None

    def __call__(self, args: Sequence, key) -> tuple:
        if self.failure is None:
            if self.graph is not None and key == self.key:
                if self._feed(args):
                    self.graph.replay()
                    self.replaying = True
                    return self.outputs
                # A bound input moved: run eagerly, capture again on the next call.
            elif key == self.seen and (self.compiles is None or not self.compiles(args)):
                return self._capture(args, key)
            self.seen = key
            self.previous = self._pointers(args)
        self.graph = None
        self.replaying = False
        return self.run(*args)

    @staticmethod
    def _pointers(args: Sequence) -> list[int]:
        return [a.data_ptr() if isinstance(a, torch.Tensor) else 0 for a in args]

    def _feed(self, args: Sequence) -> bool:
        """Puts the inputs where the graph reads them; False if a bound input moved (recapture)."""
        for i, (static, arg) in enumerate(zip(self.static, args)):
            if not isinstance(static, torch.Tensor):
                continue
            if self.bound[i]:
                if arg.data_ptr() != static.data_ptr():
                    self.copy_always.add(i)
                    return False
            else:
                static.copy_(arg)
        return True

    def _capture(self, args: Sequence, key) -> tuple:
        # Inputs that came at the same address twice are bound (read in place), others copied.
        self.bound = [isinstance(a, torch.Tensor) and i not in self.copy_always and a.data_ptr() == self.previous[i]
                      for i, a in enumerate(args)]
        static = [a if bound else (_twin(a) if isinstance(a, torch.Tensor) else a)
                  for a, bound in zip(args, self.bound)]
        graph = torch.cuda.CUDAGraph()
        torch.cuda.synchronize(self.device)
        # A pool of its own: the last graph's pool is released with it (a new shape dropped it), and PyTorch's
        # allocator refuses a capture into a released pool (an internal assert, which left the method eager).
        self.pool = torch.cuda.graph_pool_handle()
        try:
            with torch.cuda.graph(graph, pool=self.pool):
                outputs = self.run(*static)
        except Exception as exc:  # noqa: BLE001 - a method that cannot be captured runs eagerly
            self.failure = exc
            torch.cuda.synchronize(self.device)
            _end_generators_capture(self.device)
            self.replaying = False
            return self.run(*args)
        self.graph, self.key, self.static, self.outputs = graph, key, static, outputs
        for s, arg, bound in zip(static, args, self.bound):
            if isinstance(s, torch.Tensor) and not bound:
                s.copy_(arg)
        graph.replay()
        self.replaying = True
        return outputs


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
