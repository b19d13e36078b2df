"""SwiGLU on CUDA: an exported bf16 SwiGLU MLP on one token runs its gate, up and SiLU-product as one Triton kernel,
inside the method's CUDA graph, with the same outputs as the exported steps run apart; the kernel itself is the
exported chain, bit for bit. SwiGLU's home is tests/executor/test_swiglu_fusion.py."""

from __future__ import annotations

import pytest
import torch

import pterun
from pterun.core.device import DeviceType
from pterun.executor import Registries
from pterun.executor.load.fuse.swiglu import FUSED
from pterun.kernels import default_registry
from pterun.runtime import default_allocators, default_backend_registry
from tests.gpu.conftest import FIXTURES, captured, load_fixture, on
from tests.gpu.test_half_on_cuda import _close

pytestmark = pytest.mark.gpu


def _fused(name: str):
    """The fixture's program, its forward loaded on CUDA with the SwiGLU chain fused (the premise, checked)."""
    directory = FIXTURES / "half" / name
    pte, _, calls, expected = load_fixture(directory if directory.is_dir() else None)
    method = pterun.Runtime.get().load_program(pte, device="cuda").load_method("forward")
    names = [s.name for s in method.steps if s is not None and hasattr(s, "name")]
    assert FUSED in names and "aten::sigmoid.out" not in names, f"premise: the chain of {name} was fused"
    return pte, method, calls, expected


def test_swiglu_runs_fused_in_a_graph_with_the_unfused_outputs():
    pte, fused, calls, expected = _fused("swiglu-bfloat16")
    kernels = default_registry()
    kernels.unregister(FUSED, DeviceType.CUDA)
    runtime = pterun.Runtime(Registries(kernels, default_backend_registry(), default_allocators()))
    apart = runtime.load_program(pte, device="cuda").load_method("forward")
    assert FUSED not in apart.source and "aten::sigmoid.out" in apart.source
    for _ in range(3):  # eager, capture, replay
        for call, reference in zip(calls, expected):
            ours = fused.execute(on("cuda", call))[0]
            assert torch.equal(ours, apart.execute(on("cuda", call))[0])
            _close(ours.cpu(), reference[0], "swiglu")
    assert fused.cuda_graph.replaying, "premise: the last calls replayed the captured graph"


def test_a_compiled_swiglu_gives_the_plain_calls_bits():
    """compile=True keeps the fused step: Inductor launches the one-row gate/up kernel and the one-row product
    from its own code (kernels/triton: operators it sees into), so a compiled call of one token gives the plain
    call's bits, where cuBLAS's products and Inductor's SiLU would round differently."""
    pte, plain, calls, _ = _fused("swiglu-bfloat16")
    compiled = pterun.Runtime.get().load_program(pte, device="cuda", compile=True).load_method("forward")
    source = compiled.functional_source
    assert "pterun_swiglu_out(" in source and "sigmoid" not in source, "premise: the functional form keeps the step"
    for _ in range(3):  # compile, capture, replay
        for call in calls:
            assert call[0].shape[0] == 1, "premise: one token, the shape the kernels take"
            assert torch.equal(compiled.execute(on("cuda", call))[0], plain.execute(on("cuda", call))[0])
    assert compiled.compile_status == "compiled"


def test_swiglu_over_dynamic_rows_is_fused_and_sizes_its_out():
    _, method, calls, expected = _fused("swiglu-bfloat16-dynamic")
    for _ in range(2):
        for call, reference in zip(calls, expected):  # five rows, then one (the one-row Triton kernel), again
            ours = method.execute(on("cuda", call))[0]
            assert ours.shape == reference[0].shape
            _close(ours.cpu(), reference[0], "swiglu over dynamic rows")


@pytest.mark.parametrize("n, k", [(1, 7), (37, 200), (704, 256), (11008, 4096), (4096, 11008), (1000, 1001)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_gate_up_is_the_exported_chain_inside_a_captured_graph(n, k, dtype):
    from pterun.kernels.triton.gated import applies, swiglu_out
    from pterun.kernels.triton.gemv import mm_out

    generator = torch.Generator(device="cuda").manual_seed(n * 3 + k)
    # Scaled so that products stay O(1): float16 holds silu(g) * u of unscaled weights only up to k ~ 4000.
    w_gate, w_up = ((torch.randn(n, k, device="cuda", generator=generator) / k ** 0.5).to(dtype) for _ in range(2))
    x = torch.randn(1, k, device="cuda", generator=generator).to(dtype)
    out = torch.empty(1, n, device="cuda", dtype=dtype)
    assert applies(x, w_gate.t(), w_up.t(), out), "premise: the fused path is taken"
    graph = captured(lambda: swiglu_out(x, w_gate.t(), w_up.t(), out))
    for _ in range(2):  # fresh inputs in place: the graph reads them where they are
        x.copy_(torch.randn(1, k, device="cuda", generator=generator))
        out.fill_(float("nan"))
        graph.replay()
        # The exported chain on the same kernel's products: bit for bit the same.
        gate, up = torch.empty_like(out), torch.empty_like(out)
        mm_out(x, w_gate.t(), gate)
        mm_out(x, w_up.t(), up)
        g32 = gate.float()
        chain = (g32 * torch.sigmoid(g32)).to(dtype) * up
        assert torch.equal(out, chain)
        reference = torch.nn.functional.silu(x.double() @ w_gate.double().t()) * (x.double() @ w_up.double().t())
        error = ((out.double() - reference).norm() / reference.norm()).item()
        assert error < 1e-2, error
