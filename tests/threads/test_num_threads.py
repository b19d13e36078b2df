"""``num_threads``: the intra-op threads a call runs on are set for the calling thread only, inside the call,
and the thread's own count is back when the call returns (docs/threads.md).

A kernel standing in for ``aten::add.out`` records the count PyTorch's kernels would read at that moment.
No test changes a process-wide default: each sets its own worker thread's count, which is per thread
(OpenMP's ``nthreads-var``), and the worker ends with the test.
"""

from __future__ import annotations

import dataclasses
import threading

import pytest
import torch

import pterun
from pterun import pybindings
from pterun.errors import InvalidArgument, PteError
from pterun.executor import Registries
from pterun.executor.call import threads as threads_module
from pterun.kernels import Binding, default_registry
from tests.executor.programs import AddMul, add_mul
from tests.support.exporting import ExportSpec, export_program

OWN = 3  # the worker threads' own count: neither what a method asks for nor (usually) the process default


@pytest.fixture(autouse=True)
def _per_thread_control():
    assert threads_module._setters() is not None, "premise: this PyTorch runs its kernels on OpenMP"


@pytest.fixture
def observed():
    """A runtime whose add kernel records the thread count it runs under (and fails on request)."""
    seen: list[tuple[str, int]] = []
    fail = threading.Event()
    kernels = default_registry()
    generic = kernels.lookup("aten::add.out")

    def observing(count: int) -> Binding:
        binding = generic(count)

        def add(*args, **kwargs):
            seen.append((threading.current_thread().name, torch.get_num_threads()))
            if fail.is_set():
                raise RuntimeError("asked to fail")
            return binding.fn(*args, **kwargs)

        return dataclasses.replace(binding, fn=add)

    kernels.register("aten::add.out", observing)
    base = pterun.Runtime.get().registries
    return pterun.Runtime(Registries(kernels, base.backends, base.allocators)), seen, fail


def _inputs(seed: int = 0) -> list:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, 3, generator=g), torch.randn(2, 3, generator=g)]


def _on_worker(work, name: str = "worker"):
    """Runs ``work()`` on a new thread whose own count is OWN; returns (its result, the count after)."""
    out: dict = {}

    def main():
        try:
            torch.get_num_threads()  # PyTorch's per-thread initialization, which sets the count, comes first
            threads_module._setters()[0](OWN)  # this thread's own count: per thread, gone with the thread
            assert torch.get_num_threads() == OWN, "premise: the worker's own count is set"
            out["result"] = work()
            out["after"] = torch.get_num_threads()
        except BaseException as exc:  # noqa: BLE001 - re-raised on the test's thread
            out["error"] = exc

    thread = threading.Thread(target=main, name=name)
    thread.start()
    thread.join()
    if "error" in out:
        raise out["error"]
    return out["result"], out["after"]


@pytest.mark.parametrize("asked", [1, 2])
def test_the_count_is_set_inside_the_call_and_the_threads_own_is_back_after(observed, asked):
    runtime, seen, _ = observed
    method = runtime.load_program(add_mul().pte, num_threads=asked).load_method("forward")
    before = torch.get_num_threads()
    outputs, after = _on_worker(lambda: method.execute(_inputs()))
    assert seen == [("worker", min(asked, threads_module.cores()))]
    assert after == OWN
    assert torch.get_num_threads() == before  # the test's own thread never saw a change
    x, y = _inputs()
    assert torch.equal(outputs[0], x + y) and torch.equal(outputs[1], x * y)
    assert method.num_threads == min(asked, threads_module.cores()) and method.num_threads_reason == "num_threads"


def test_by_default_a_program_of_small_operators_runs_on_one_thread(observed):
    runtime, seen, _ = observed
    method = runtime.load_program(add_mul().pte).load_method("forward")
    assert method.num_threads == 1 and "small" in method.num_threads_reason
    _, after = _on_worker(lambda: method.execute(_inputs()))
    assert seen == [("worker", 1)] and after == OWN


def test_a_failing_call_puts_the_count_back(observed):
    runtime, seen, fail = observed
    method = runtime.load_program(add_mul().pte, num_threads=1).load_method("forward")
    fail.set()

    def failing():
        with pytest.raises(PteError):
            method.execute(_inputs())

    _, after = _on_worker(failing)
    assert seen == [("worker", 1)] and after == OWN
    assert threads_module._HELD.running == []


def test_two_methods_with_different_counts_run_at_once_on_two_threads(observed):
    runtime, seen, _ = observed
    program_one = runtime.load_program(add_mul().pte, num_threads=1)
    program_two = runtime.load_program(add_mul().pte, num_threads=2)
    methods = {"one": program_one.load_method("forward"), "two": program_two.load_method("forward")}
    barrier = threading.Barrier(2)
    results: dict = {}

    def worker(name: str):
        def work():
            barrier.wait()
            outs = []
            for seed in range(200):
                outs.append((seed, methods[name].execute(_inputs(seed))))
            return outs

        results[name] = _on_worker(work, name)

    workers = [threading.Thread(target=worker, args=(name,)) for name in methods]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert set(results) == {"one", "two"}
    for name, (outs, after) in results.items():
        assert after == OWN, name
        for seed, (added, multiplied) in outs:
            x, y = _inputs(seed)
            assert torch.equal(added, x + y) and torch.equal(multiplied, x * y)
    counts = {name: {n for who, n in seen if who == name} for name in methods}
    assert counts["one"] == {1}
    # The second may get fewer threads while the first holds a core, never more than it asked or the cores.
    assert counts["two"] and counts["two"] <= set(range(1, min(2, threads_module.cores()) + 1))
    assert threads_module._HELD.running == []


def _large_add_mul():
    # 256x256 inputs: each call's arguments hold 196,608 elements, past what counts as small.
    return export_program("threads-large-add-mul",
                          lambda: ExportSpec(AddMul(), (torch.randn(256, 256), torch.randn(256, 256))))


@pytest.mark.parametrize("free", [0.4, 64.0])
def test_by_default_a_large_program_runs_on_the_threads_own_count_within_the_free_cores(observed, monkeypatch, free):
    runtime, seen, _ = observed
    method = runtime.load_program(_large_add_mul().pte).load_method("forward")
    assert "small" not in method.num_threads_reason, "premise: the program's operators are not small"
    # What the machine's other processes leave free, as if sampled just now.
    monkeypatch.setattr(threads_module._LOAD, "free", free)
    monkeypatch.setattr(threads_module._LOAD, "next", float("inf"))
    g = torch.Generator().manual_seed(0)
    inputs = [torch.randn(256, 256, generator=g), torch.randn(256, 256, generator=g)]
    (added, multiplied), after = _on_worker(lambda: method.execute(inputs))
    expected = 1 if free < 1 else min(OWN, threads_module.cores())
    assert seen == [("worker", expected)] and after == OWN
    assert torch.equal(added, inputs[0] + inputs[1]) and torch.equal(multiplied, inputs[0] * inputs[1])


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_a_bad_count_is_an_invalid_argument_naming_the_option(bad):
    path = add_mul().pte
    loads = [
        lambda: pterun.Runtime.get().load_program(path, num_threads=bad),
        lambda: pybindings._load_for_executorch(str(path), num_threads=bad),
        lambda: pybindings._load_program(str(path), num_threads=bad),
        lambda: pybindings._load_for_executorch_from_buffer(path.read_bytes(), num_threads=bad),
    ]
    for load in loads:
        with pytest.raises(InvalidArgument, match="num_threads"):
            load()


def test_the_pybindings_pass_the_count_on():
    path = add_mul().pte
    module = pybindings._load_for_executorch(str(path), num_threads=1)
    x, y = _inputs()
    assert torch.equal(module.forward([x, y])[0], x + y)
    assert module.program.load_method("forward").num_threads == 1
    program = pybindings._load_program(str(path), num_threads=1)
    assert program.program.load_method("forward").num_threads == 1


def test_the_count_reaches_torchs_openmp_when_another_wheel_maps_its_own_first():
    """sentencepiece (pterun.llm's tokenizers) bundles a libgomp of its own; loaded before the count is first set,
    it is mapped ahead of torch's, and a count set there is one torch never reads."""
    import subprocess
    import sys
    from pathlib import Path

    pytest.importorskip("sentencepiece")
    bundled = next(Path(sys.modules["sentencepiece"].__file__).parents[1].glob("sentencepiece.libs/libgomp*"), None)
    assert bundled is not None, "sentencepiece brings no libgomp of its own here: no premise"
    test = f"{__file__}::test_by_default_a_program_of_small_operators_runs_on_one_thread"
    code = ("import sys, sentencepiece, pytest; "
            f"sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', '-p', 'no:xdist', {test!r}]))")
    done = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parents[2], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("free", [0.4, 64.0])
def test_loading_runs_on_the_cores_other_processes_leave_free(monkeypatch, free):
    """Loading packs weights with PyTorch's parallel operators: like a call, it runs on the free cores, and the
    loading thread's own count is back afterwards."""
    at_load: list[int] = []
    kernels = default_registry()
    generic = kernels.lookup("aten::add.out")

    def observing(count: int) -> Binding:
        at_load.append(torch.get_num_threads())  # the factory runs while the method loads
        return generic(count)

    kernels.register("aten::add.out", observing)
    base = pterun.Runtime.get().registries
    runtime = pterun.Runtime(Registries(kernels, base.backends, base.allocators))
    monkeypatch.setattr(threads_module._LOAD, "free", free)
    monkeypatch.setattr(threads_module._LOAD, "next", float("inf"))
    method, after = _on_worker(lambda: runtime.load_program(add_mul().pte).load_method("forward"))
    assert at_load, "premise: the kernel was resolved during the load"
    assert set(at_load) == {1 if free < 1 else min(OWN, threads_module.cores())} and after == OWN
    x, y = _inputs()
    assert torch.equal(method.execute([x, y])[0], x + y)
