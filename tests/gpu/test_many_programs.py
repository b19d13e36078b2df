"""A long-lived process (a server, a notebook, a batch worker) loads, runs and drops many programs on one GPU:
CUDA graphs, compile=True and plain runs interleaved in varying orders, every output checked, and every
compiled method compiled for real."""

from __future__ import annotations

import gc
import random

import pytest
import torch

import pterun
from pterun.executor.codegen.torch_compile import COMPILED, PLAIN_KEPT
from tests.gpu.conftest import FIXTURES, load_fixture, on
from tests.gpu.test_half_on_cuda import _close
from tests.support.compare import assert_matches

pytestmark = pytest.mark.gpu

GPU_RTOL = 2e-4

# (fixture, how it runs): more compiled methods than torch.compile's per-frame recompilation limit (8).
PROGRAMS = [
    ("corpus/et_toy_mul", "compile"), ("corpus/llama", "graphs"), ("corpus/et_toy_softmax", "compile"),
    ("corpus/mobilenet_v2", "graphs"), ("corpus/et_toy_linear", "compile"), ("corpus/bert", "compile"),
    ("corpus/et_toy_conv1d", "compile"), ("corpus/resnet", "plain"), ("corpus/et_toy_add_mul", "compile"),
    ("corpus/whisper_encoder", "graphs"), ("corpus/et_ds_cnn", "compile"), ("corpus/et_toy_add", "compile"),
    ("corpus/vit", "compile"), ("corpus/et_resnet8", "compile"), ("half/swiglu-bfloat16", "graphs"),
    ("corpus/et_llama_kv", "graphs"), ("half/llama-bfloat16", "graphs"), ("corpus/gpt2", "compile"),
]
MODES = {"graphs": {}, "plain": {"cuda_graphs": False}, "compile": {"compile": True}}


def _check(outputs, reference, what):
    for i, (got, want) in enumerate(zip(on("cpu", outputs), reference)):
        if not isinstance(want, torch.Tensor):
            assert got == want, what
        elif want.dtype in (torch.float16, torch.bfloat16):
            _close(got, want, f"{what}[{i}]")
        else:
            assert_matches(got, want, rtol=GPU_RTOL, what=f"{what}[{i}]")


def _run(directory, mode) -> pterun.Method:
    pte, ptd, calls, expected = load_fixture(directory)
    method = pterun.Runtime.get().load_program(pte, data_path=ptd or None, device="cuda", **MODES[mode])
    method = method.load_method("forward")
    stateful = any(isinstance(v, pterun.format.TensorSpec) and v.memory_id is not None and v.fqn
                   for v in method.plan.values)
    for _ in range(1 if stateful else 3):  # eager, capture, replay
        for call, reference in zip(calls, expected):
            _check(method.execute(on("cuda", call)), reference, f"{directory.name} ({mode})")
    if mode == "compile":
        status = method.compile_status  # compiled, whichever code its graph replays (tests/gpu/test_graphs.py)
        assert status == COMPILED or status.startswith(PLAIN_KEPT), f"{directory.name}: {status}"
    return method


@pytest.mark.parametrize("seed", [0, 1])
def test_many_programs_in_one_process(seed):
    present = [(FIXTURES / name, mode) for name, mode in PROGRAMS if (FIXTURES / name).is_dir()]
    assert len(present) == len(PROGRAMS), "premise: every fixture was exported"
    order = list(present)
    random.Random(seed).shuffle(order)
    kept = []
    for k, (directory, mode) in enumerate(order):
        method = _run(directory, mode)
        if k % 3 == 0:
            kept.append((directory, method))  # some stay loaded while others come and go
        del method
        if k % 4 == 3:
            gc.collect()
    # Methods kept from the start still give the right answers after everything that ran since.
    for directory, method in kept:
        _, _, calls, expected = load_fixture(directory)
        stateful = any(isinstance(v, pterun.format.TensorSpec) and v.memory_id is not None and v.fqn
                       for v in method.plan.values)
        if not stateful:
            _check(method.execute(on("cuda", calls[0])), expected[0], f"{directory.name} again")
    torch.cuda.synchronize()
