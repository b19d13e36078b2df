"""Float32 is computed in float32 while a method runs, whatever precision switches the caller has set,
and the caller's switches are back when the call returns.

A kernel standing in for ``aten::mm.out`` records the switches PyTorch's own kernels would read at that
moment; the bundled example program calls it on every execution.
"""

from __future__ import annotations

import dataclasses
import threading

import pytest
import torch

import pterun
from pterun.cli.options import example_program
from pterun.executor import Registries
from pterun.kernels import Binding, default_registry

_get = torch._C._get_fp32_precision_getter


def _switches() -> dict:
    return {
        "mkldnn.matmul": _get("mkldnn", "matmul"),
        "mkldnn.conv": _get("mkldnn", "conv"),
        "autocast": torch.is_autocast_enabled("cpu"),
    }


@pytest.fixture
def observed():
    """A runtime whose mm kernel records the switches it runs under."""
    seen: list[dict] = []
    kernels = default_registry()
    generic = kernels.lookup("aten::mm.out")

    def observing(count: int) -> Binding:
        binding = generic(count)

        def mm(*args, **kwargs):
            seen.append(_switches())
            return binding.fn(*args, **kwargs)

        return dataclasses.replace(binding, fn=mm)

    kernels.register("aten::mm.out", observing)
    base = pterun.Runtime.get().registries
    runtime = pterun.Runtime(Registries(kernels, base.backends, base.allocators))
    return runtime, seen


def _tokens(seed: int = 0) -> torch.Tensor:
    return torch.randint(0, 1024, (1, 8), generator=torch.Generator().manual_seed(seed))


@pytest.fixture
def medium_precision():
    saved = torch.get_float32_matmul_precision()  # user-set: the caller's setting, put back after
    torch.set_float32_matmul_precision("medium")  # user-set: what the test is about
    yield
    torch.set_float32_matmul_precision(saved)  # user-set


def test_reduced_matmul_precision_set_by_the_caller_is_off_inside_and_back_after(observed, medium_precision):
    runtime, seen = observed
    assert _get("mkldnn", "matmul") == "bf16", "premise: the caller allowed bfloat16 float32 products"
    method = runtime.load_program(example_program()).load_method("forward")
    method.execute([_tokens()])
    assert seen, "premise: the program multiplies matrices"
    assert all(s["mkldnn.matmul"] in ("none", "ieee") for s in seen), seen
    assert torch.get_float32_matmul_precision() == "medium"  # user-set: still the caller's
    assert _get("mkldnn", "matmul") == "bf16"


def test_results_do_not_depend_on_the_callers_switches(medium_precision):
    method = pterun.Runtime.get().load_program(example_program()).load_method("forward")
    tokens = _tokens(1)
    with_medium = method.execute([tokens])[0]
    torch.set_float32_matmul_precision("highest")  # user-set
    with torch.autocast("cpu", dtype=torch.bfloat16):
        under_autocast = method.execute([tokens])[0]
    default = method.execute([tokens])[0]
    assert torch.equal(with_medium, default) and torch.equal(under_autocast, default)
    assert default.dtype == torch.float32


def test_autocast_is_off_inside_and_on_again_after(observed):
    runtime, seen = observed
    method = runtime.load_program(example_program()).load_method("forward")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.is_autocast_enabled("cpu"), "premise: the caller runs under autocast"
        method.execute([_tokens()])
        assert torch.is_autocast_enabled("cpu")
    assert seen and not any(s["autocast"] for s in seen), seen


def test_a_failing_call_still_restores_the_switches(observed, medium_precision):
    runtime, _ = observed
    method = runtime.load_program(example_program()).load_method("forward")
    with pytest.raises(pterun.errors.PteError):
        method.execute([torch.full((1, 8), 10**6)])  # token ids past the embedding table
    assert _get("mkldnn", "matmul") == "bf16"
    method.execute([_tokens()])


def test_concurrent_calls_restore_the_switches_once_all_are_done(observed, medium_precision):
    runtime, seen = observed
    program = runtime.load_program(example_program())
    methods = [program.load_method("forward", cached=False) for _ in range(3)]
    errors: list[BaseException] = []

    def work(method):
        try:
            for seed in range(5):
                method.execute([_tokens(seed)])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(m,)) for m in methods]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(seen) >= 15 and all(s["mkldnn.matmul"] in ("none", "ieee") for s in seen)
    assert _get("mkldnn", "matmul") == "bf16" and torch.get_float32_matmul_precision() == "medium"  # user-set
