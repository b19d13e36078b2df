"""A SwiGLU MLP's gate, up and SiLU-product steps become one fused call where the registry has a kernel for it
(on CUDA with Triton); the fused call computes what the steps compute.

SwiGLU's home. What needs a GPU is in one file where scripts/gpu-tests.sh collects GPU tests,
tests/gpu/test_swiglu_on_cuda.py: the fusion on CUDA inside a captured graph and its Triton kernel against the
exported chain. The WebGPU backend's own fusion of the chain inside its graphs (backends/webgpu/fuse.py) is that
backend's, tested beside it (tests/backends/webgpu/test_webgpu_swiglu.py)."""

from __future__ import annotations

import torch

import pterun
from pterun.core.device import DeviceType
from pterun.executor import Registries
from pterun.executor.load.fuse.swiglu import FUSED
from pterun.kernels import Binding, default_registry, exact_count
from pterun.runtime import default_allocators, default_backend_registry
from tests.support.exporting import ExportSpec, export_program
from tests.support.models.small import SwiGLUMLP


class _Leaky(SwiGLUMLP):
    """The gate product is also an output: the chain's intermediates are not its own."""

    def forward(self, x):
        gate = self.gate(x)
        return self.down(torch.nn.functional.silu(gate) * self.up(x)), gate


def _program(name, module, dtype):
    torch.manual_seed(0)
    module = module.to(dtype).eval()
    return export_program(name, lambda: ExportSpec(module, (torch.randn(1, 48, dtype=dtype),))).pte


def _names(method) -> list[str]:
    return [s.name for s in method.steps if s is not None and hasattr(s, "name")]


def _swiglu(x, gate_t, up_t, out):
    """The chain's steps, for x and out of any rank (their leading dimensions the rows), as the CUDA kernel takes
    them."""
    n = gate_t.shape[1]
    if out.shape[:-1] != x.shape[:-1] or out.shape[-1] != n:
        out.resize_(*x.shape[:-1], n)
    rows = x.view(-1, x.shape[-1])
    gate = torch.mm(rows, gate_t).float()
    torch.mul((gate * torch.sigmoid(gate)).to(x.dtype), torch.mm(rows, up_t), out=out.view(-1, n))
    return out


def _runtime_with_cpu_kernel():
    kernels = default_registry()
    binding = Binding(_swiglu, (0, 1, 2), (("out", 3),), None, (), (3,), strided=True)
    kernels.register(FUSED, exact_count(binding, 4, FUSED), DeviceType.CPU)
    return pterun.Runtime(Registries(kernels, default_backend_registry(), default_allocators()))


def test_the_exported_bf16_chain_is_found_and_fused_where_a_kernel_is_registered():
    pte = _program("swiglu-fusion-bf16", SwiGLUMLP(), torch.bfloat16)
    plain = pterun.Runtime.get().load_program(pte).load_method("forward")
    assert "aten::sigmoid.out" in _names(plain) and FUSED not in _names(plain), "no fused kernel on the CPU"

    fused = _runtime_with_cpu_kernel().load_program(pte).load_method("forward")
    names = _names(fused)
    assert names.count(FUSED) == 1 and names.count("aten::mm.out") == 1 and "aten::sigmoid.out" not in names
    for seed in range(3):
        x = torch.randn(1, 48, generator=torch.Generator().manual_seed(seed)).to(torch.bfloat16)
        assert torch.equal(fused.execute([x])[0], plain.execute([x])[0])
    line = next(line for line in fused.source.splitlines() if f"# {FUSED}" in line)
    assert "aten::mm.out x2" in line and "aten::sigmoid.out" in line, "the comment lists the replaced operators"


def test_a_sequence_of_tokens_reaches_the_products_through_views_and_is_fused_with_them():
    """transformers' exports: x of [batch, tokens, dim] with a token count that changes, its rows flattened for the
    products by et_view steps and the results viewed back."""
    torch.manual_seed(0)
    module = SwiGLUMLP().to(torch.bfloat16).eval()
    tokens = torch.export.Dim("tokens", min=1, max=16)
    pte = export_program("swiglu-fusion-sequence", lambda: ExportSpec(
        module, (torch.randn(1, 5, 48, dtype=torch.bfloat16),), dynamic_shapes=({1: tokens},))).pte
    plain = pterun.Runtime.get().load_program(pte).load_method("forward")
    assert "executorch_prim::et_view.default" in _names(plain), "premise: the products are reached through views"
    fused = _runtime_with_cpu_kernel().load_program(pte).load_method("forward")
    names = _names(fused)
    assert names.count(FUSED) == 1 and names.count("aten::mm.out") == 1 and "aten::sigmoid.out" not in names
    for count in (1, 7, 16, 3):
        x = torch.randn(1, count, 48, generator=torch.Generator().manual_seed(count)).to(torch.bfloat16)
        out = fused.execute([x])[0]
        assert out.shape == (1, count, 48) and torch.equal(out, plain.execute([x])[0])


def test_fuse_false_and_the_functional_form_keep_the_steps():
    pte = _program("swiglu-fusion-bf16", SwiGLUMLP(), torch.bfloat16)
    runtime = _runtime_with_cpu_kernel()
    assert FUSED not in _names(runtime.load_program(pte, fuse=False).load_method("forward"))
    compiled = runtime.load_program(pte, compile=True).load_method("forward")
    assert FUSED in _names(compiled), "premise: the method's own code runs the fused call"
    assert "sigmoid" in compiled.functional_source and "swiglu" not in compiled.functional_source


def test_no_chain_in_float32_or_when_an_intermediate_is_an_output():
    runtime = _runtime_with_cpu_kernel()
    for name, module, dtype in (("swiglu-fusion-f32", SwiGLUMLP(), torch.float32),
                                ("swiglu-fusion-leaky", _Leaky(), torch.bfloat16)):
        names = _names(runtime.load_program(_program(name, module, dtype)).load_method("forward"))
        assert "aten::sigmoid.out" in names and FUSED not in names, name
