"""At steady state, execute allocates no memory: not for values (they live in the plan's arenas), not
for the call itself, and, for kernels that need no scratch space, not inside the kernels either."""

from __future__ import annotations

import gc
import tracemalloc

import torch
from torch.profiler import ProfilerActivity, profile

import pterun
from pterun.cli.options import example_program
from tests.support.exporting import ExportSpec, export_program
from tests.support.models.small import MLP


def _tensor_allocations(fn) -> list[str]:
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    return [e.name for e in prof.events() if e.cpu_memory_usage > 0]


def test_execute_allocates_no_tensor_memory():
    torch.manual_seed(0)
    exported = export_program(
        "steady-mlp-tanh", lambda: ExportSpec(MLP(32, 64, 8, torch.tanh, torch.sigmoid), (torch.randn(4, 32),)))
    method = pterun.Runtime.get().load_program(exported.pte).load_method("forward")
    x = torch.randn(4, 32)
    for _ in range(3):
        method.execute([x], clone_outputs=False)
    assert _tensor_allocations(lambda: method.execute([x], clone_outputs=False)) == []
    # The premise: the profiler does see allocations, e.g. the copy made when outputs are cloned.
    assert _tensor_allocations(lambda: method.execute([x]))


def test_python_memory_does_not_grow_with_calls():
    method = pterun.Runtime.get().load_program(example_program()).load_method("forward")
    tokens = torch.randint(0, 1024, (1, 64))
    for _ in range(20):
        method.execute([tokens], clone_outputs=False)
    tracemalloc.start()
    try:
        growth = []
        for calls in (10, 100):
            gc.collect()
            before = tracemalloc.take_snapshot()
            for _ in range(calls):
                method.execute([tokens], clone_outputs=False)
            gc.collect()
            after = tracemalloc.take_snapshot()
            growth.append(sum(s.size_diff for s in after.compare_to(before, "lineno")))
    finally:
        tracemalloc.stop()
    # Ten times the calls, no more memory: nothing is kept per call.
    assert growth[1] < growth[0] + 16 * 1024, growth
