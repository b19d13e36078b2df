"""Methods used from several threads: a shared method's calls take turns, separate methods of one program
run side by side, and step-by-step calls that would mix two threads' values are refused (docs/threads.md).

Every output is compared with what the same method computed for the same input on one thread, so the
comparison is exact: the same kernels on the same memory.
"""

from __future__ import annotations

import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

import pterun
from pterun import pybindings
from pterun.backends import BackendInterface, BackendRegistry
from pterun.errors import ErrorCode, InvalidState
from pterun.executor import Registries
from pterun.kernels import default_registry
from pterun.runtime import default_allocators
from tests.threads.programs import PROGRAMS, float_inputs, float_mlp, int8_mlp

THREADS = 4
CALLS = 40  # per thread


def _load(exported) -> pterun.executor.Program:
    return pterun.Runtime.get().load_program(exported.pte)


def _in_threads(work, count: int = THREADS) -> None:
    """Runs ``work(t)`` on ``count`` threads started together; re-raises the first failure."""
    barrier = threading.Barrier(count)
    errors: list[BaseException] = []

    def main(t: int) -> None:
        try:
            barrier.wait()
            work(t)
        except BaseException as exc:  # noqa: BLE001 - reported by the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=main, args=(t,), name=f"worker-{t}") for t in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]


def _check(results: dict, expected: dict) -> None:
    assert len(results) == len(expected)
    wrong = [seed for seed, out in results.items() if not torch.equal(out, expected[seed])]
    assert not wrong, f"{len(wrong)} of {len(results)} outputs differ from the single-threaded run"


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_threads_sharing_a_method_take_turns(name):
    export, make_inputs = PROGRAMS[name]
    program = _load(export())
    method = program.load_method("forward")
    assert program.load_method("forward") is method  # the premise: every thread gets this one object
    seeds = range(THREADS * CALLS)
    inputs = {seed: make_inputs(seed) for seed in seeds}
    expected = {seed: method.execute(inputs[seed])[0] for seed in seeds}
    assert len({tuple(out.shape) for out in expected.values()}) > 1 or name != "dynamic-batch"
    results = {}

    def work(t: int) -> None:
        shared = program.load_method("forward")
        for seed in range(t, len(seeds), THREADS):
            results[seed] = shared.execute(inputs[seed])[0]

    _in_threads(work)
    _check(results, expected)
    seed = len(seeds) - 1
    assert torch.equal(method.execute(inputs[seed])[0], expected[seed])


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_separate_methods_of_one_program_run_side_by_side(name):
    export, make_inputs = PROGRAMS[name]
    program = _load(export())
    results, expected = {}, {}

    def work(t: int) -> None:
        own = program.load_method("forward", cached=False)  # loaded concurrently too
        mine = range(t, THREADS * CALLS, THREADS)
        inputs = {seed: make_inputs(seed) for seed in mine}
        for seed in mine:  # one call first, before the others run, then all of them together
            expected[seed] = own.execute(inputs[seed])[0]
        barrier.wait()
        for seed in mine:
            results[seed] = own.execute(inputs[seed])[0]

    barrier = threading.Barrier(THREADS)
    _in_threads(work)
    _check(results, expected)


def test_uncached_methods_are_independent_and_share_the_constants():
    program = _load(float_mlp())
    cached = program.load_method("forward")
    first, second = program.load_method("forward", cached=False), program.load_method("forward", cached=False)
    assert len({id(cached), id(first), id(second)}) == 3
    assert program.load_method("forward") is cached
    plan = program.file.plan("forward")
    constants = [i for i, v in enumerate(plan.values) if isinstance(v, pterun.format.TensorSpec) and v.is_constant]
    planned = [*plan.inputs, *plan.outputs]
    assert constants and all(plan.values[i].memory_id is not None for i in planned)
    # Constants are the program's, read-only and shared; planned memory is each method's own.
    assert all(first.value(i).data_ptr() == second.value(i).data_ptr() for i in constants)
    assert all(first.value(i).data_ptr() != second.value(i).data_ptr() for i in planned)
    x, y = float_inputs(1), float_inputs(2)
    out_x = first.execute(x)[0]
    first.set_inputs(x)
    assert torch.equal(second.execute(y)[0], cached.execute(y)[0])  # the other method's inputs are untouched
    first.run()
    assert torch.equal(first.get_outputs()[0], out_x)


def test_pybindings_calls_from_threads_take_turns():
    exported = float_mlp()
    method = pybindings._load_program(str(exported.pte)).load_method("forward")
    module = pybindings._load_for_executorch(str(exported.pte))
    seeds = range(THREADS * CALLS)
    inputs = {seed: float_inputs(seed) for seed in seeds}
    expected = {seed: method.call(inputs[seed])[0] for seed in seeds}
    results, forwarded = {}, {}

    def work(t: int) -> None:
        for seed in range(t, len(seeds), THREADS):
            results[seed] = method(inputs[seed])[0]
            forwarded[seed] = module.forward(inputs[seed])[0]

    _in_threads(work)
    _check(results, expected)
    _check(forwarded, expected)


# -- step by step -----------------------------------------------------------------------------


def _assert_refused(info, *fragments):
    error = info.value
    assert isinstance(error, InvalidState) and error.code == ErrorCode.InvalidState
    for fragment in fragments:
        assert fragment in str(error), f"{fragment!r} not in {str(error)!r}"


def _two_calls():
    """The float MLP's method, two inputs, and its output for each computed on this thread."""
    method = _load(float_mlp()).load_method("forward")
    x, y = float_inputs(1), float_inputs(2)
    return method, x, y, method.execute(x)[0], method.execute(y)[0]


def test_another_thread_cannot_mix_into_inputs_being_set():
    method, x, y, want_x, want_y = _two_calls()
    with ThreadPoolExecutor(1, thread_name_prefix="stepper") as stepper:
        stepper.submit(method.set_inputs, x).result()
        name = stepper.submit(lambda: threading.current_thread().name).result()
        for call in (lambda: method.set_inputs(y), lambda: method.set_input(y[0], 0), method.run,
                     lambda: method.execute(y), lambda: method.set_output(0, torch.empty(4, 10))):
            with pytest.raises(InvalidState) as info:
                call()
            _assert_refused(info, "method 'forward'", repr(name), repr(threading.current_thread().name),
                            "has set inputs and not run yet")
        # The stepping thread's call goes on, with its own inputs.
        stepper.submit(method.run).result()
        assert torch.equal(stepper.submit(method.get_outputs).result()[0], want_x)
    assert torch.equal(method.execute(y)[0], want_y)


def test_outputs_of_a_run_another_thread_overwrote_are_refused():
    method, x, y, want_x, want_y = _two_calls()
    with ThreadPoolExecutor(1, thread_name_prefix="stepper") as stepper:
        stepper.submit(method.set_inputs, x).result()
        stepper.submit(method.run).result()
        assert torch.equal(method.execute(y)[0], want_y)  # between the stepper's run and get_outputs
        with pytest.raises(InvalidState) as info:
            stepper.submit(method.get_outputs).result()
        _assert_refused(info, "method 'forward'", repr(threading.current_thread().name), "stepper",
                        "has not run it since")
        with pytest.raises(InvalidState):
            stepper.submit(method.get_outputs, False).result()
        assert torch.equal(stepper.submit(method.execute, x).result()[0], want_x)
        assert torch.equal(stepper.submit(method.get_outputs).result()[0], want_x)
        with pytest.raises(InvalidState) as info:
            method.get_outputs()  # the last call was the stepper's
        _assert_refused(info, "stepper", repr(threading.current_thread().name))
    method.set_inputs(y)
    method.run()
    assert torch.equal(method.get_outputs()[0], want_y)


def test_a_thread_that_ended_half_way_does_not_hold_the_method():
    method = _load(float_mlp()).load_method("forward")
    x, y = float_inputs(1), float_inputs(2)
    want_y = method.execute(y)[0]
    inputs_set, finish = threading.Event(), threading.Event()

    def set_inputs_and_leave():
        method.set_inputs(x)
        inputs_set.set()
        finish.wait()

    thread = threading.Thread(target=set_inputs_and_leave)
    thread.start()
    inputs_set.wait()
    with pytest.raises(InvalidState):  # the premise: while it lives, it holds the method
        method.execute(y)
    finish.set()
    thread.join()
    assert torch.equal(method.execute(y)[0], want_y)


# -- a call from inside the method's own execution ---------------------------------------------


class _CallingBack(BackendInterface):
    """XNNPACK, but the first call of each delegate calls the method again from inside its execution."""

    def __init__(self, method_box: list, errors: list) -> None:
        from pterun.backends.xnnpack import XnnpackBackend

        self._inner = XnnpackBackend()
        self._box, self._errors = method_box, errors

    def is_available(self):
        return True

    def init(self, context, processed, specs):
        return self._inner.init(context, processed, specs)

    def execute(self, handle, args):
        if self._box and not self._errors:
            method = self._box[0]
            for call in (lambda: method.execute(list(args[:1])), method.run, method.get_outputs):
                try:
                    call()
                except InvalidState as exc:
                    self._errors.append(exc)
        return self._inner.execute(handle, args)

    def destroy(self, handle):
        self._inner.destroy(handle)


def test_a_call_from_inside_the_execution_is_refused_not_deadlocked():
    box, errors = [], []
    backends = BackendRegistry()
    backends.register("XnnpackBackend", _CallingBack(box, errors))
    runtime = pterun.Runtime(Registries(default_registry(), backends, default_allocators()))
    exported = int8_mlp()
    method = runtime.load_program(exported.pte).load_method("forward")
    reference = pterun.Runtime.get().load_program(exported.pte).load_method("forward")
    x = PROGRAMS["int8-xnnpack"][1](3)
    box.append(method)
    out = method.execute(x)[0]
    assert len(errors) == 3
    for error in errors:
        assert error.code == ErrorCode.InvalidState and "method 'forward'" in str(error)
        assert "from inside its own execution" in str(error)
    assert torch.equal(out, reference.execute(x)[0])
    assert torch.equal(method.execute(x)[0], out)


def test_kernel_names_can_be_listed_while_another_thread_registers():
    from pterun.kernels import KernelRegistry

    registry = KernelRegistry()
    for i in range(2000):  # a listing long enough to be interrupted
        registry.register(f"custom::base{i}", lambda count: None)
    listing, done, errors = threading.Event(), threading.Event(), []

    def register() -> None:
        listing.wait()  # the other thread is listing: the registrations overlap its listings
        for i in range(5000):
            registry.register(f"custom::op{i}", lambda count: None)
        done.set()

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often, so a listing overlaps a registration
    try:
        writer = threading.Thread(target=register)
        writer.start()
        listed = 0
        while not done.is_set():
            listing.set()
            try:
                listed += len(registry.names) > 0
            except RuntimeError as exc:  # "dictionary changed size during iteration"
                errors.append(exc)
                break
        writer.join()
    finally:
        sys.setswitchinterval(interval)
    assert listed and not errors, errors
    assert len(registry.names) == 7000
