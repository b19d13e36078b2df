"""A replayed method's host path: the Python execute() runs around the replay of its CUDA graph, counted, so that
it cannot grow unseen (a count, not a time: it holds on a busy machine).

The GPU must not wait for it: a replay's kernels take tens of microseconds, the host path must stay a few. CI has
no GPU, so here the graph is a stand-in (its capture runs the method once, its replay launches nothing) and the
count is pterun's own Python on the way to ``CUDAGraph.replay()``: binding the inputs, finding the graph, handing
the outputs back. tests/gpu/test_graphs.py counts the same path with a real graph; bench/gpu.py times it."""

from __future__ import annotations

import pytest
import torch

import pterun
from pterun.cli.options import example_program
from pterun.executor.call.graphs import CudaGraphRunner
from tests.support.host_path import calls_made

# The functions a replayed execute(clone_outputs=False) of the example program enters, Python's and builtins', the
# replay included (measured: 24 on Python 3.11, 38 before replays stopped setting a thread count; 3.12 inlines a
# comprehension). Raise it only for something a replay needs.
HOST_PATH_CALLS = 24


class _StandInGraph:
    replays = 0

    def replay(self) -> None:
        _StandInGraph.replays += 1


class _StandInCapture:
    def __init__(self, graph, pool=None) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass


@pytest.fixture
def replayed(monkeypatch):
    """The example program's method on the CPU, with the runner a CUDA method has and a stand-in graph."""
    monkeypatch.setattr(torch.cuda, "CUDAGraph", _StandInGraph)
    monkeypatch.setattr(torch.cuda, "graph", _StandInCapture)
    monkeypatch.setattr(torch.cuda, "graph_pool_handle", lambda: None)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    method = pterun.Runtime.get().load_program(example_program()).load_method("forward")
    assert method.cuda_graph is None, "premise: a CPU method has no graph of its own"
    method._graph = CudaGraphRunner(method._loaded.run, torch.device("cpu"))
    method._plain_outputs = False  # as a method with a graph computes it at load
    tokens = torch.randint(0, 1024, (1, 32))
    for _ in range(3):  # eagerly, captured, replayed
        method.execute([tokens], clone_outputs=False)
    return method, tokens


def test_a_replayed_call_enters_no_more_functions_than_it_did(replayed):
    method, tokens = replayed
    before = _StandInGraph.replays
    made = calls_made(lambda: method.execute([tokens], clone_outputs=False))
    assert method.cuda_graph.replaying and _StandInGraph.replays == before + 1, "premise: the call replayed"
    assert sum(made.values()) <= HOST_PATH_CALLS, f"the host path of a replay grew: {dict(made)}"
    # Nothing of the method's own code nor of its thread count runs on a replay (where a call without a graph runs
    # both, as the count shows).
    assert not any("<pterun method" in name or "Threads" in name for name in made), dict(made)
    plain = pterun.Runtime.get().load_program(example_program()).load_method("forward", cached=False)
    eager = calls_made(lambda: plain.execute([tokens], clone_outputs=False))
    assert any("<pterun method" in name for name in eager) and any("Threads" in name for name in eager), (
        "premise: the count names the method's code and the thread count where they run")


def test_the_host_path_does_not_grow_with_calls(replayed):
    method, tokens = replayed
    first = calls_made(lambda: method.execute([tokens], clone_outputs=False))
    for _ in range(200):
        method.execute([tokens], clone_outputs=False)
    assert calls_made(lambda: method.execute([tokens], clone_outputs=False)) == first
    assert method.cuda_graph.replaying, "premise: the calls replayed"
