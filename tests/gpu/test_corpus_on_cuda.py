"""`load_program(..., device="cuda")` runs every program of the differential corpus on the GPU."""

from __future__ import annotations

import pytest
import torch

import pterun
from tests.gpu.conftest import fixture_params, load_fixture, on
from tests.support.compare import assert_matches

pytestmark = pytest.mark.gpu

# cuBLAS and cuDNN sum in other orders than ExecuTorch's portable kernels.
GPU_RTOL = 2e-4


@pytest.mark.parametrize("directory", fixture_params("corpus"))
def test_program_runs_on_cuda_and_matches_executorch(directory):
    pte, ptd, calls, expected = load_fixture(directory)
    program = pterun.Runtime.get().load_program(pte, data_path=ptd or None, device="cuda")
    methods = program.method_names
    assert "forward" in methods
    method = program.load_method("forward")
    # Twice over: the first call with a shape runs eagerly, the second captures a CUDA graph and the
    # third replays it (stateful programs see the same call sequence as the reference did, so only
    # stateless ones repeat).
    stateful = any(isinstance(v, pterun.format.TensorSpec) and v.memory_id is not None and v.fqn
                   for v in program.file.plan("forward").values)
    rounds = 1 if stateful else 3
    for _ in range(rounds):
        for call, reference in zip(calls, expected):
            outputs = method.execute(on("cuda", call))
            for out in outputs:
                if isinstance(out, torch.Tensor):
                    assert out.is_cuda, "outputs stay on the device"
            assert_matches(on("cpu", outputs), reference, rtol=GPU_RTOL, what=directory.name)


def test_run_anything_places_arenas_and_constants_on_the_gpu():
    import gc

    from pterun.cli.options import example_program

    gc.collect()  # earlier tests' tensors, freed while this program loads, would hide its arenas
    before = torch.cuda.memory_allocated()
    program = pterun.Runtime.get().load_program(example_program(), device="cuda")
    method = program.load_method("forward")
    meta = method.metadata
    arenas = sum(meta.memory_planned_buffer_size(i) for i in range(meta.num_memory_planned_buffers()))
    assert torch.cuda.memory_allocated() - before >= arenas
    tokens = torch.randint(0, 1024, (1, 16), device="cuda")
    (logits,) = method.execute([tokens])
    cpu = pterun.Runtime.get().load_program(example_program()).load_method("forward").execute([tokens.cpu()])[0]
    assert logits.is_cuda
    assert_matches(logits.cpu(), cpu, rtol=GPU_RTOL)
