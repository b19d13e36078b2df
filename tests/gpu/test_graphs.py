"""Whole-method CUDA graphs: capture, replay, recapture on a new shape, fall back where impossible."""

from __future__ import annotations

import contextlib

import pytest
import torch

import pterun
from pterun.cli.options import example_program
from pterun.executor.call import graphs
from pterun.executor.call.graphs import CudaGraphRunner
from pterun.executor.codegen.torch_compile import COMPILED, PLAIN_KEPT, PLAIN_WINS_BELOW
from tests.gpu.conftest import FIXTURES, load_fixture, on
from tests.support.compare import assert_matches
from tests.support.host_path import calls_made

pytestmark = pytest.mark.gpu


def _compiled(status: str) -> bool:
    """Compiled, whichever code its graphs were found to replay faster (test_compile_true_keeps_...)."""
    return status == COMPILED or status.startswith(PLAIN_KEPT)


def _method(pte, **options):
    return pterun.Runtime.get().load_program(pte, device="cuda", **options).load_method("forward")


def test_replay_matches_kernel_by_kernel_and_the_graph_is_used():
    graphed, plain = _method(example_program()), _method(example_program(), cuda_graphs=False)
    tokens = torch.randint(0, 1024, (1, 24), device="cuda")
    for _ in range(4):
        a, b = graphed.execute([tokens]), plain.execute([tokens])
        torch.testing.assert_close(a[0], b[0], rtol=0, atol=0)
    assert graphed.cuda_graph is not None and graphed.cuda_graph.graph is not None and graphed.cuda_graph.replaying
    assert plain.cuda_graph is None


def test_a_replayed_call_s_host_path_does_not_grow():
    # tests/executor/test_host_path.py counts the same path against a budget, with a stand-in graph; here the real
    # one, with a CUDA input's binder.
    method = _method(example_program())
    tokens = torch.randint(0, 1024, (1, 32), device="cuda")
    for _ in range(3):
        method.execute([tokens], clone_outputs=False)
    made = calls_made(lambda: method.execute([tokens], clone_outputs=False))
    assert method.cuda_graph.replaying, "premise: the call replayed"
    assert any(name.endswith("CUDAGraph.replay") for name in made), f"premise: the count sees the replay: {dict(made)}"
    assert not any("<pterun method" in name or "Threads" in name for name in made), dict(made)
    for _ in range(100):
        method.execute([tokens], clone_outputs=False)
    assert calls_made(lambda: method.execute([tokens], clone_outputs=False)) == made


def test_a_new_shape_runs_eagerly_then_is_captured_again():
    method = _method(example_program())
    reference = pterun.Runtime.get().load_program(example_program()).load_method("forward")
    for length in (8, 8, 8, 17, 17, 17, 8):
        tokens = torch.randint(0, 1024, (1, length), device="cuda")
        (logits,) = method.execute([tokens])
        assert logits.shape == (1, length, 1024)
        assert_matches(logits.cpu(), reference.execute([tokens.cpu()])[0], rtol=2e-4)


def test_outputs_handed_out_from_a_replayed_graph_are_not_overwritten():
    resident = FIXTURES / "cuda" / "resident"
    pte, ptd, calls, expected = load_fixture(resident if resident.exists() else None)
    method = _method(pte)
    results = [method.execute(on("cuda", calls[i % 2]), clone_outputs=False) for i in range(4)]
    assert method.cuda_graph.replaying
    for i, outputs in enumerate(results):
        assert_matches(on("cpu", outputs), expected[i % 2], rtol=2e-4)


def test_inputs_passed_again_are_read_in_place_and_others_copied():

    pte, ptd, calls, expected = load_fixture(FIXTURES / "cuda" / "resident")
    method = _method(pte)
    x, y = on("cuda", calls[0])
    for _ in range(3):
        method.execute([x, y])
    runner = method.cuda_graph
    assert runner.replaying and runner.bound[:2] == [True, True], "the same tensors three times: read in place"
    x.copy_(on("cuda", calls[1])[0])
    y.copy_(on("cuda", calls[1])[1])
    assert_matches(on("cpu", method.execute([x, y])), expected[1], rtol=2e-4)
    # New tensors: the moved inputs are copied from now on, and results stay right throughout.
    for i in range(4):
        outputs = method.execute(on("cuda", calls[i % 2]))
        assert_matches(on("cpu", outputs), expected[i % 2], rtol=2e-4)
    assert runner.replaying and runner.bound[:2] == [False, False]


def test_shapes_that_alternate_each_keep_their_graph():
    """An LLM's prompt and one-token steps alternate shapes: each set of shapes keeps its graph, and a return to
    one replays it at once, its outputs in the shapes it writes (an eager call with other shapes resized them
    in between)."""
    from pterun.executor.call.graphs import KEPT

    method = _method(example_program())
    reference = pterun.Runtime.get().load_program(example_program()).load_method("forward")
    runner = method.cuda_graph
    replayed = []
    for length in (8, 8, 8, 17, 17, 17, 8, 3, 17, 8, 8, 5, 5, 4, 4, 6, 6, 17, 17):
        tokens = torch.randint(0, 1024, (1, length), device="cuda")
        (logits,) = method.execute([tokens])
        assert logits.shape == (1, length, 1024)
        assert_matches(logits.cpu(), reference.execute([tokens.cpu()])[0], rtol=2e-4, what=f"length {length}")
        replayed.append(runner.replaying)
    assert runner.failure is None
    assert replayed[6] and replayed[8] and replayed[9], "a return to a kept shape replays its graph at once"
    # Capturing 6 dropped 17's graph, the least recently used: 17 runs eagerly again, then is captured.
    assert len(runner.graphs) == KEPT and not replayed[-2] and replayed[-1]


def test_a_compiled_method_of_dynamic_shapes_compiles_outside_the_capture_and_replays_the_compiled_code():
    """compile=True compiles a set of input shapes once it comes twice in a row: that call runs eagerly, never inside a
    capture (Inductor launches kernels while it compiles), and the next call captures the compiled code."""
    method = _method(example_program(), compile=True)
    assert method.compile_status == "compiled", "premise: the method has a functional form"
    reference = pterun.Runtime.get().load_program(example_program()).load_method("forward")
    runner = method.cuda_graph
    for k, length in enumerate((8, 8, 8, 8, 17, 8, 8)):
        tokens = torch.randint(0, 1024, (1, length), device="cuda")
        (logits,) = method.execute([tokens])
        assert_matches(logits.cpu(), reference.execute([tokens.cpu()])[0], rtol=2e-4, what=f"call {k}")
        assert runner.failure is None, f"call {k}: {runner.failure!r}"
        if k == 1:
            assert runner.graph is None, "the call that compiled ran eagerly"
        if k == 2:
            assert runner.graph is not None, "the next one captured"
    assert len(method._loaded.compiled_function.shapes) == 1, "length 17 came once: not compiled"
    assert runner.replaying and _compiled(method.compile_status), method.compile_status


def test_a_compiled_methods_replays_count_as_calls_so_a_prompt_between_generations_never_compiles():
    """Generations alternate a prompt's length with replayed one-token steps. Replays do not call the compiled
    function; unless they count, the prompt came "twice in a row" at the second generation and compiled (3.7 s
    inside a 100M decoder's generation on an H100). Calls left uncompiled run the method's generated code."""
    method = _method(example_program(), compile=True)
    assert method.compile_status == "compiled", "premise: the method has a functional form"
    compiled = method._loaded.compiled_function
    assert compiled.uncompiled is not compiled.functional, "premise: uncompiled calls run the generated code"
    reference = pterun.Runtime.get().load_program(example_program()).load_method("forward")
    runner = method.cuda_graph
    for generation in range(3):
        for k, length in enumerate((12, 1, 1, 1, 1)):
            tokens = torch.randint(0, 1024, (1, length), device="cuda")
            (logits,) = method.execute([tokens])
            assert_matches(logits.cpu(), reference.execute([tokens.cpu()])[0], rtol=2e-4,
                           what=f"generation {generation} call {k}")
        assert runner.replaying, f"generation {generation}: the one-token steps replay"
    assert len(compiled.shapes) == 1, "only the one-token step compiled"
    assert runner.failure is None and _compiled(method.compile_status), method.compile_status


def test_a_method_that_cannot_be_captured_leaves_the_random_generators_working():
    # A failed capture used to leave PyTorch's CUDA generator marked as capturing: every later random op on
    # the device raised, in the caller's code and in the next method's capture.
    x = torch.ones(4, device="cuda")

    def run(t):
        return (t * float(t.sum()),)  # reads a value on the host: cannot be captured

    runner = CudaGraphRunner(run, torch.device("cuda"))
    for _ in range(3):
        (out,) = runner.call([x], contextlib.nullcontext())
        assert torch.equal(out, x * 4)
    assert runner.failure is not None and not runner.replaying, "premise: the capture failed"
    assert torch.randint(0, 10, (64,), device="cuda").max() < 10
    test_replay_matches_kernel_by_kernel_and_the_graph_is_used()  # draws inputs, then captures and replays


@pytest.mark.parametrize("plain_faster", [True, False], ids=["plain-kept", "compiled-kept"])
def test_compile_true_keeps_whichever_graph_replays_faster(monkeypatch, plain_faster):
    """A method whose replays change nothing a later call reads has its first capture of each set of shapes made
    both ways, compiled and plain, timed, and the faster kept (the compiled code unless the plain code is clearly
    faster); compile_status says which, with both times. The timing is the test's, so the choice is known."""
    times = (0.2, 0.1) if plain_faster else (0.1, 0.2)  # compiled, plain: ms a replay
    monkeypatch.setattr(graphs, "replay_ms", lambda pair, device: list(times))
    method = _method(example_program(), compile=True)
    plain = _method(example_program())
    runner, compiled = method.cuda_graph, method._loaded.compiled_function
    assert runner.plain is compiled.uncompiled is not compiled.functional, "premise: raced against its plain code"
    tokens = torch.randint(0, 1024, (1, 8), device="cuda")
    for k in range(5):  # eager, compile, capture both and race, replay, replay
        (ours,) = method.execute([tokens])
        (theirs,) = plain.execute([tokens])
        assert runner.failure is None, f"call {k}: {runner.failure!r}"
    assert runner.replaying and list(compiled.timed.values()) == [times]
    (key,) = runner.chosen
    if plain_faster:
        assert runner.chosen[key] is compiled.uncompiled
        assert method.compile_status.startswith(PLAIN_KEPT), method.compile_status
        assert "[1, 8]" in method.compile_status and "0.100 ms" in method.compile_status, method.compile_status
        assert torch.equal(ours, theirs), "the plain code's graph: the plain load's bits"
    else:
        assert runner.chosen[key] is runner.run and method.compile_status == COMPILED
        assert_matches(ours.cpu(), theirs.cpu(), rtol=2e-4)
    # The kept choice holds for that set of shapes: a graph captured again for it is not raced again.
    runner.graphs.clear()
    for _ in range(3):
        method.execute([tokens])
    assert runner.replaying and len(compiled.timed) == 1 and len(runner.chosen) == 1


def test_compile_true_times_both_graphs_on_the_gpu_and_keeps_one():
    method = _method(example_program(), compile=True)
    reference = pterun.Runtime.get().load_program(example_program()).load_method("forward")
    runner, compiled = method.cuda_graph, method._loaded.compiled_function
    tokens = torch.randint(0, 1024, (1, 16), device="cuda")
    for _ in range(4):
        (logits,) = method.execute([tokens])
    assert runner.replaying and runner.failure is None
    ((compiled_ms, plain_ms),) = compiled.timed.values()
    assert compiled_ms > 0 and plain_ms > 0
    kept_compiled = plain_ms >= compiled_ms * PLAIN_WINS_BELOW
    assert (method.compile_status == COMPILED) == kept_compiled, (method.compile_status, plain_ms)
    assert_matches(logits.cpu(), reference.execute([tokens.cpu()])[0], rtol=2e-4)
