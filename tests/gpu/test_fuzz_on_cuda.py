"""The fuzzer's GPU seeds (tests/fuzz/seeds.py) on a CUDA device, plain and with compile=True, against the
outputs ExecuTorch's CPU runtime gave (scripts/make-gpu-fixtures.py saved them next to each program).

Plain runs are held to the corpus's tolerance. compile=True lets TorchInductor fuse
elementwise chains, which for float16 and bfloat16 computes a chain in float32 and
rounds once where ExecuTorch rounds after every operator; those outputs are
compared in float32 relative to their largest value.
"""

from __future__ import annotations

import json

import pytest
import torch

import pterun
from tests.gpu.conftest import fixture_params, load_fixture, on
from tests.support.compare import assert_matches

pytestmark = pytest.mark.gpu

GPU_RTOL = 2e-4  # cuBLAS and cuDNN sum in other orders than ExecuTorch's portable kernels
COMPILED_RTOL = 1e-3
COMPILED_HALF_RTOL = 2e-2


# Seeds whose compiled form TorchInductor gets wrong on CUDA, with the pure-PyTorch reproduction. pterun's
# plain run is right; torch.compile of the functional form alone, outside pterun, gives the same wrong answer.
INDUCTOR_CUDA_BUGS = {
    "seed-100731": "TorchInductor 2.11 on CUDA: eq(cat([constant_pad_nd(argmax(x)), ...]), argmax(x)) comes out "
                   "all True (torch.compile of the functional form alone does the same; eager is right)",
}


def _assert_close(actual: list, expected: list, *, compiled: bool, what: str) -> None:
    assert len(actual) == len(expected), f"{what}: {len(actual)} outputs, expected {len(expected)}"
    for i, (a, e) in enumerate(zip(actual, expected)):
        if isinstance(a, torch.Tensor):
            assert a.is_cuda, f"{what}[{i}]: outputs stay on the device"
            a = a.cpu()
        if compiled and isinstance(e, torch.Tensor) and e.dtype in (torch.float16, torch.bfloat16):
            assert a.dtype == e.dtype, f"{what}[{i}]: dtype {a.dtype}, expected {e.dtype}"
            assert_matches(a.float(), e.float(), rtol=COMPILED_HALF_RTOL, what=f"{what}[{i}]")
        else:
            assert_matches(a, e, rtol=COMPILED_RTOL if compiled else GPU_RTOL, ulps=2, what=f"{what}[{i}]")


@pytest.mark.parametrize("compiled", [False, True], ids=["plain", "compiled"])
@pytest.mark.parametrize("directory", fixture_params("fuzz"))
def test_fuzz_program_on_cuda_matches_executorch(directory, compiled, request):
    known = INDUCTOR_CUDA_BUGS.get(getattr(directory, "name", ""))
    if compiled and known:
        request.applymarker(pytest.mark.xfail(reason=known, strict=False))
    pte, ptd, calls, expected = load_fixture(directory)
    spec = json.loads((directory / "spec.json").read_text())
    program = pterun.Runtime.get().load_program(pte, data_path=ptd or None, device="cuda", compile=compiled)
    method = program.load_method("forward")
    if compiled:
        status = method.compile_status
        assert status == "compiled" or status.startswith("not compiled: "), status
    # A program with mutable buffers sees the reference's call sequence once; others repeat it, so that
    # later rounds replay the CUDA graphs captured for each shape.
    rounds = 1 if spec["buffers"] else 3
    for r in range(rounds):
        for k, (call, reference) in enumerate(zip(calls, expected)):
            outputs = method.execute(on("cuda", call))
            _assert_close(outputs, reference, compiled=compiled, what=f"{directory.name} round {r} call {k}")
