"""Runs of steps that make native calls alone, made again as one native call (executor/codegen/replay.py, the
recording in native/module.c): ExecuTorch's bits on every call, and never a replay of what a step did not do."""

from __future__ import annotations

import re

import pytest
import torch

import pterun
from pterun import native
from pterun.executor.codegen.replay import ATTEMPTS, Replay
from pterun.kernels import fused
from tests.support.compare import assert_matches
from tests.support.oracle import reference_module

kernels = native.kernels
pytestmark = pytest.mark.skipif(kernels is None, reason="needs pterun's native kernels (CI builds them)")


def _replayed(method: pterun.Method) -> int:
    return sum(method.replays.values())


def _run_source(method: pterun.Method, start: int) -> str:
    """The generated lines of the run that starts at step ``start``."""
    return method.source[method.source.index(f"if not _replay{start}("):method.source.index(f"_replay{start}.stop()")]


def test_an_8da4w_decoders_layers_replay_with_the_steps_bits():
    """ExecuTorch's 8da4w Llama: its layers' steps (the XNNPACK delegates, the fused RMSNorms, attentions and
    SiLU-products, the views between them) replay a few decode steps in, each call's attentions at its positions,
    and every call's logits are the unfused steps' to the bit (and ExecuTorch's, as the unfused ones are): decode
    steps, a second prompt (new sizes: the steps again), and the decode steps after it (the recording's state
    again)."""
    from tests.support.llm_programs import llama_args, llama_program

    program = llama_program("xnnpack-8da4w")
    method = pterun.Runtime.get().load_program(program.pte).load_method("forward")
    plain = pterun.Runtime.get().load_program(program.pte, fuse=False).load_method("forward")
    theirs = reference_module(program.pte)
    # The premise: one run from the first layer's norm to the last layer's products (attentions at each call's
    # positions), and one of the last norm with the output's product; in the unfused steps, runs of one delegate
    # each, PyTorch's calls between the delegates but for small native arithmetic, a run of its own.
    assert len(method.replays) == 2, method.replays
    first = next(iter(method.replays))
    source = _run_source(method, first)
    assert source.count("pterun_cached_attention") == llama_args()["n_layers"]
    assert source.count("delegate_XnnpackBackend") == 4 * llama_args()["n_layers"]
    delegates = [len(re.findall(r"delegate_XnnpackBackend\w*\(", _run_source(plain, start))) for start in plain.replays]
    assert delegates.count(1) == 4 * llama_args()["n_layers"] + 1 and set(delegates) == {0, 1}, delegates
    assert not any("pterun_" in _run_source(plain, start) for start in plain.replays)
    calls = [[torch.tensor([[3, 17, 25, 9, 41, 7]]), torch.tensor([0])]]
    calls += [[torch.tensor([[t]]), torch.tensor([6 + i])] for i, t in enumerate([5, 11, 2, 30, 8])]
    calls += [[torch.tensor([[13, 14, 15]]), torch.tensor([11])]]
    calls += [[torch.tensor([[t]]), torch.tensor([14 + i])] for i, t in enumerate([6, 19, 23, 1, 40])]
    replayed = []
    for inputs in calls:
        before = _replayed(method)
        actual = method.execute([x.clone() for x in inputs])[0]
        what = f"logits after {int(inputs[1]) + inputs[0].shape[1]} tokens"
        assert torch.equal(actual, plain.execute([x.clone() for x in inputs])[0]), what
        assert_matches(actual, theirs.run_method("forward", [x.clone() for x in inputs])[0], what=what)
        replayed.append((_replayed(method) - before) / len(method.replays))
    # A run records its steps where a call starts in the state the call before left (a decode step's sizes, once
    # the steps around it have left theirs), and replays from the call after: both runs by the fourth decode step;
    # the layers' run not for the second prompt (its sizes), and again a few decode steps after it. The last norm
    # and output product take the last token alone (a prompt's sizes too), so that run replays for the second
    # prompt.
    assert replayed[:2] == [0, 0] and replayed[4:6] == [1, 1] and replayed[-2:] == [1, 1], replayed
    assert replayed[6] == 0.5, replayed


def test_a_replay_waits_for_a_step_that_was_not_native_calls_alone():
    """Where a step of the run takes its PyTorch path, the recording is dropped and the steps run every call; after
    a few such calls the run stops recording."""
    kernel = fused.SiluMulInto()
    gate, up = torch.randn(64), torch.randn(64)
    sig, prod, out = torch.empty(64), torch.empty(64), torch.empty(64)
    replay = Replay((gate, up, sig, prod, out), (kernel.ran_natively,))
    expected = torch.mul(torch.mul(gate, torch.sigmoid(gate)), up)

    def call() -> bool:
        if replay(()):
            return True
        try:
            kernel(gate, up, sig=sig, prod=prod, out=out)
            replay.keep()
        finally:
            replay.stop()
        return False

    assert fused._sigmoid_lanes(), "the premise: the native SiLU-product runs here"
    assert [call() for _ in range(4)] == [False, False, True, True]  # run, recorded, replayed
    assert torch.equal(out, expected)
    out.zero_()
    assert call() and torch.equal(out, expected), "the replay writes what the step wrote"

    kernel = fused.SiluMulInto()
    narrow = gate[::2]  # not contiguous: the steps' three torch calls
    sig, prod, out = torch.empty(32), torch.empty(32), torch.empty(32)
    replay = Replay((narrow, up[:32], sig, prod, out), (kernel.ran_natively,))
    calls = []
    for _ in range(ATTEMPTS + 4):
        if replay(()):
            calls.append(True)
            continue
        kernel(narrow, up[:32], sig=sig, prod=prod, out=out)
        replay.keep()
        replay.stop()
        calls.append(False)
    assert not any(calls) and replay.replayed == 0 and replay._failures == ATTEMPTS
    assert torch.equal(out, torch.mul(torch.mul(narrow, torch.sigmoid(narrow)), up[:32]))


def test_a_replay_is_made_only_in_the_state_it_was_recorded_in():
    """Another thread count, another size of a tensor the steps take, a per-call tensor at another address: the
    steps run (and record for the new state) rather than the recorded calls."""
    kernel = fused.AddRmsNormInto()
    a, b, weight = torch.randn(2, 64), torch.randn(2, 64), torch.randn(64)
    total, out = torch.empty(2, 64), torch.empty(2, 64)
    replay = Replay((b, weight, total, out), (kernel.ran_natively,))

    def call(x: torch.Tensor) -> bool:
        if replay((), x):
            return True
        try:
            kernel(x, b, weight, 1e-5, total=total, out=out)
            replay.keep(x)
        finally:
            replay.stop()
        return False

    assert [call(a) for _ in range(3)] == [False, False, True]
    moved = a.clone()  # the same values at another address
    assert [call(moved) for _ in range(3)] == [False, False, True]
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(threads + 1)
        assert not call(moved)
    finally:
        torch.set_num_threads(threads)
    total.resize_(1, 64)  # a size the recording did not leave
    assert not call(moved)
    assert torch.equal(out, torch.rms_norm(moved + b, (64,), weight, 1e-5))


def test_a_recording_keeps_only_calls_it_can_make_again():
    """Native/module.c: recordable calls are kept; any other native call, a failing call, or a probe spoils the
    recording; stopping without one, or twice, gives None; a replay takes only a recording."""
    x = torch.randn(2, 64)
    weight, out = torch.randn(64), torch.empty(2, 64)
    lanes = fused._rms_norm_lanes()
    assert lanes, "the premise: the native RMSNorm runs here"

    def norm(o: torch.Tensor) -> None:
        kernels.rms_norm(x.data_ptr(), weight.data_ptr(), o.data_ptr(), 2, 64, 1e-5, lanes)

    kernels.record_start()
    norm(out)
    calls = kernels.record_stop()
    assert calls is not None and kernels.record_stop() is None
    expected = out.clone()
    out.zero_()
    kernels.replay(calls)
    assert torch.equal(out, expected)

    # copy_bytes of no bytes: a call the recording cannot keep, which writes nothing.
    for spoiler in (lambda: kernels.copy_bytes(out.data_ptr(), x.data_ptr(), 0), kernels.record_spoil):
        kernels.record_start()
        norm(out)
        spoiler()
        norm(out)
        assert kernels.record_stop() is None
    kernels.record_start()
    with pytest.raises(ValueError, match="rows of 64 values in vectors of 3"):
        kernels.rms_norm(x.data_ptr(), weight.data_ptr(), out.data_ptr(), 2, 64, 1e-5, 3)
    norm(out)
    assert kernels.record_stop() is None, "a failed call spoils the recording"
    with pytest.raises(ValueError):
        kernels.replay(object())
    assert kernels.record_stop() is None


def test_an_xnnpack_translation_of_native_calls_alone_says_so():
    """The 8da4w decoder's products are native calls alone at every size (contiguous arguments); with pterun's native
    kernels turned off they are PyTorch's calls, and nothing replays."""
    from tests.support.llm_programs import llama_program

    program = llama_program("xnnpack-8da4w")
    for options in ({}, {"XnnpackBackend": {"native": False}}):
        method = pterun.Runtime.get().load_program(program.pte, backend_options=options).load_method("forward")
        for position in range(5):
            method.execute([torch.tensor([[3]]), torch.tensor([position])])
        delegates = [s.fn for s in method.steps if hasattr(getattr(s, "fn", None), "ran_natively")]
        assert len(delegates) > 4, "the premise: the XNNPACK delegates"
        assert all(d._last.native_only == (not options) for d in delegates)
        assert bool(_replayed(method)) == (not options)


def test_positions_an_attention_refuses_leave_every_byte_to_the_steps():
    """A recording's attentions take each call's positions; where one refuses them (past its cache) the replay makes
    no call at all, every tensor as it was, and says so (the steps then run and refuse); a wrong count of positions
    is an error."""
    from tests.support.llm_programs import llama_args, llama_program

    method = pterun.Runtime.get().load_program(llama_program("xnnpack-8da4w").pte).load_method("forward")
    method.execute([torch.tensor([[3, 4]]), torch.tensor([0])])
    for position in range(2, 7):
        method.execute([torch.tensor([[5]]), torch.tensor([position])])
    first = next(iter(method.replays))
    assert method.replays[first] > 0, "the premise: the layers replay"
    calls = method._loaded.generated.replays[first]._calls
    tensors = [t for t in method._loaded.objects if isinstance(t, torch.Tensor)]
    before = [t.clone() for t in tensors]
    layers = llama_args()["n_layers"]
    assert kernels.replay(calls, *([7, 7, 7] * (layers - 1) + [7, 7, 10**6])) is False
    assert all(torch.equal(t, b) for t, b in zip(tensors, before)), "no byte written"
    with pytest.raises(TypeError, match=f"{layers} attentions take {3 * layers} positions, got 3"):
        kernels.replay(calls, 7, 7, 7)
    assert kernels.replay(calls, *([7, 7, 7] * layers)) is True


def test_a_recording_keeps_the_translations_whose_buffers_it_writes():
    """A delegate keeps its last 16 translations; prompts of 17 other lengths drop the decode step's, whose buffers
    the recorded calls write: the recording keeps it, and the decode steps after them replay with the steps' bits."""
    from pterun.backends.xnnpack.backend import MAX_TRANSLATIONS
    from tests.support.llm_programs import llama_program

    program = llama_program("xnnpack-8da4w")
    method = pterun.Runtime.get().load_program(program.pte).load_method("forward")
    plain = pterun.Runtime.get().load_program(program.pte, fuse=False).load_method("forward")

    def both(tokens: list[int], position: int) -> None:
        inputs = [torch.tensor([tokens]), torch.tensor([position])]
        assert torch.equal(method.execute([x.clone() for x in inputs])[0], plain.execute(inputs)[0]), position

    for position in range(4):
        both([5 + position], position)
    first = next(iter(method.replays))
    assert method.replays[first] > 0, "the premise: the layers replay"
    delegate = next(s.fn for s in method.steps if hasattr(getattr(s, "fn", None), "ran_natively"))
    decode = delegate._last
    for length in range(2, MAX_TRANSLATIONS + 3):
        both(list(range(1, length + 1)), 4)
    assert decode not in delegate._translations.values(), "the premise: the decode step's translation dropped"
    replayed = method.replays[first]
    for position in range(4, 8):
        both([9], position)
    assert method.replays[first] > replayed


def test_a_step_that_raises_while_recording_leaves_nothing_recording():
    """The generated code stops a recording in ``finally``: a step that raises mid-run leaves no recording running
    (which would otherwise keep every later native call of the thread), and the run records again later."""
    kernel = fused.AddRmsNormInto()
    a, b, weight = torch.randn(2, 64), torch.randn(2, 64), torch.randn(64)
    total, out = torch.empty(2, 64), torch.empty(2, 64)
    replay = Replay((), (kernel.ran_natively,))

    def call(fail: bool) -> bool:
        if replay(()):
            return True
        try:
            kernel(a, b, weight, 1e-5, total=total, out=out)
            if fail:
                raise RuntimeError("a step failed")
            replay.keep()
        finally:
            replay.stop()
        return False

    assert call(False) is False
    with pytest.raises(RuntimeError, match="a step failed"):
        call(True)  # the state the last call left: this one records, and fails
    assert kernels.record_stop() is None, "nothing left recording"
    assert [call(False) for _ in range(2)] == [False, True]
    assert torch.equal(out, torch.rms_norm(a + b, (64,), weight, 1e-5))
