"""Half precision on the WebGPU backend.

A float16 program holds float16 values: every operator computes in float32 and its result is rounded to
half, as PyTorch's CPU kernels compute half tensors, so the program matches PyTorch bit for bit. ExecuTorch's
portable kernels round some intermediate values of their own (a layer norm's statistics, a softmax's sum)
and land a few half units away from both; the program matches them to half's precision.
A ``force_fp16`` program (the Vulkan partitioner's option) takes and returns float32 but computes in half
inside the delegate: it matches the float32 program to half's precision, not better.
"""

from __future__ import annotations

import pytest
import torch

import pterun
from pterun.backends.webgpu.graph import DType
from tests.backends.webgpu.adapter import needs_adapter
from tests.backends.webgpu.kernels import check
from tests.backends.webgpu.programs import BACKEND, graphs
from tests.support.exporting import ExportSpec, export_program
from tests.support.oracle import run_reference

pytestmark = [needs_adapter]


class HalfBlock(torch.nn.Module):
    """A linear layer, SiLU, layer norm, a scalar product and softmax in the input's precision, and a
    conversion to float32."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(16, 24)
        self.norm = torch.nn.LayerNorm(24)

    def forward(self, x):
        y = self.norm(torch.nn.functional.silu(self.linear(x))) * 3.0
        return torch.softmax(y, -1), x.float() + 1


def _block() -> HalfBlock:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return HalfBlock().eval()


def _export(name: str, dtype: torch.dtype, lower, spec: dict | None = None):
    def make() -> ExportSpec:
        module = _block().to(dtype)
        x = torch.randn(3, 16, generator=torch.Generator().manual_seed(1)).to(dtype)
        return ExportSpec(module, (x,), lower=lower)

    return export_program(f"webgpu-half-{name}", make)


def _vulkan(spec: dict):
    def partitioners() -> list:
        from executorch.backends.vulkan.partitioner.vulkan_partitioner import VulkanPartitioner

        return [VulkanPartitioner(spec)]

    return partitioners


def _inputs(dtype: torch.dtype, seed: int) -> list:
    return [torch.randn(3, 16, generator=torch.Generator().manual_seed(seed)).to(dtype)]


def _half_tensors(pte) -> set:
    return {v.dtype for g in graphs(pte) for v in g.values if hasattr(v, "dtype")}


def test_float16_program_matches_pytorch_exactly_and_cpu_runtime_to_half_precision():
    lowered = _export("fp16-vk", torch.float16, _vulkan({}))
    reference = _export("fp16-cpu", torch.float16, "portable")
    assert DType.FLOAT16 in _half_tensors(lowered.pte), "premise: the delegate holds float16 tensors"
    method = pterun.Runtime.get().load_program(lowered.pte).load_method("forward")
    assert [h for h in method.delegate_handles if h is not None], f"premise: a {BACKEND} delegate"
    eager = _block().half()
    for seed in range(3):
        args = _inputs(torch.float16, seed)
        got, cpu = method.execute(args), run_reference(reference.pte, args)
        with torch.no_grad():
            want = eager(*args)
        for k, (a, e, c) in enumerate(zip(got, want, cpu, strict=True)):
            assert a.dtype == e.dtype, f"output {k}: {a.dtype}, expected {e.dtype}"
            assert torch.equal(a, e), f"seed {seed} output {k}: max diff {(a.float() - e.float()).abs().max()}"
            assert torch.allclose(a.float(), c.float(), rtol=1e-2, atol=4e-3), f"seed {seed} output {k}"


def test_force_fp16_computes_in_half():
    lowered = _export("force-fp16-vk", torch.float32, _vulkan({"force_fp16": True}))
    reference = _export("force-fp16-cpu", torch.float32, "portable")
    assert _half_tensors(lowered.pte) == {DType.FLOAT16, DType.INT32}, "premise: computed in float16"
    method = pterun.Runtime.get().load_program(lowered.pte).load_method("forward")
    for seed in range(3):
        args = _inputs(torch.float32, seed)
        got, want = method.execute(args), run_reference(reference.pte, args)
        for k, (a, e) in enumerate(zip(got, want, strict=True)):
            assert a.dtype == torch.float32, f"output {k} comes back as {a.dtype}"
            # Half's precision (2^-11 relative), a few roundings deep; far from float32's.
            assert torch.allclose(a, e, rtol=8e-3, atol=4e-3), f"seed {seed} output {k}"
            assert not torch.equal(a, e) or k == 1, f"seed {seed} output {k}: computed in float32"


@pytest.mark.parametrize("values", [
    [1.0, 1.0 + 2**-11, 1.0 + 3 * 2**-11, -1.0 - 2**-11],  # ties to even
    [65504.0, 65519.0, 65520.0, -70000.0, 1e30],  # the largest half, and past it
    [2**-14, 2**-15 + 2**-25, 3 * 2**-25, 1e-30, -2**-24],  # subnormal halves
    [float("inf"), float("-inf"), 0.0, -0.0, 0.1],
])
def test_values_are_rounded_to_half_as_torch_rounds_them(values):
    x = torch.tensor(values * 20, dtype=torch.float32)
    actual, _ = check("dim_order_ops._to_dim_order_copy.default", x, torch.float16,
                      reference=lambda x, d: x.to(d))
    assert torch.equal(actual[0].float(), x.to(torch.float16).float())


def test_nan_stays_nan_in_half():
    x = torch.tensor([float("nan"), 1.0], dtype=torch.float32)
    actual, _ = check("dim_order_ops._to_dim_order_copy.default", x, torch.float16,
                      reference=lambda x, d: x.to(d))
    assert torch.isnan(actual[0][0]) and actual[0][1] == 1.0
