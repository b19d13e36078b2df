"""8da4w language models on a CUDA device give the CPU's logits, call by call, and its greedy tokens.

The CPU's are ExecuTorch's on the same CPU (tests/llm/test_llm_programs.py holds them to it in CI). The
4-bit layers are summed in the order of the XNNPACK kernels that CPU runs, on the GPU too
(backends/xnnpack/nodes/qblock.py), by a Triton kernel or, with ``native=False``, by PyTorch's ops: bit for
bit (tests/backends/xnnpack/test_xnnpack_gpu.py holds them to the CPU's bits in both orders). The program's
other steps (RMSNorm, rotary embeddings, attention) are CUDA's float kernels, which round some results a
unit in the last place away from the CPU's (docs/precision.md), so the logits are held to float32's
tolerance, 1e-5 of their scale: an 8da4w layer summed in another order, as before, was 0.08 off. The
programs are transformers' Qwen2 (biased q/k/v projections) and SmolLM3 quantized as optimum-executorch
quantizes them, and ExecuTorch's Llama from ``export_llama``, with and without its quantized KV cache.
"""

from __future__ import annotations

import pytest
import torch

import pterun
from tests.gpu.conftest import FIXTURES

pytestmark = pytest.mark.gpu

NAMES = ("transformers-qwen2-8da4w", "transformers-smollm3-8da4w", "llama-xnnpack-8da4w",
         "llama-xnnpack-8da4w-quantized-kv")
PROMPT = [1, 17, 23, 5, 99, 42, 7, 250, 311]
NEW_TOKENS = 8


def _inputs(name: str, chunk: list[int], start: int) -> list[torch.Tensor]:
    tokens = torch.tensor([chunk])
    if name.startswith("transformers-"):  # cache positions, as transformers' static-cache module takes them
        return [tokens, torch.arange(start, start + len(chunk))]
    return [tokens, torch.tensor([start])]


@pytest.mark.parametrize("kernel", ["triton", "torch"])
@pytest.mark.parametrize("name", NAMES)
def test_8da4w_logits_on_cuda_are_the_cpus(name, kernel):
    pte = FIXTURES / "llm" / name / "program.pte"
    if not pte.exists():
        pytest.skip("no fixtures: run scripts/make-gpu-fixtures.py")
    options = {} if kernel == "triton" else {"XnnpackBackend": {"native": False}}
    cpu = pterun.Runtime.get().load_program(pte).load_method("forward")
    gpu = pterun.Runtime.get().load_program(pte, device="cuda", backend_options=options).load_method("forward")

    def premise():  # the 4-bit layers took the path under test
        routes = [way for d in gpu.delegate_handles for _, way in d.routes if "4-bit block product" in way]
        marker = "(Triton)" if kernel == "triton" else "float32 lane sums"
        assert routes and all(marker in way for way in routes), routes

    _greedy_on_both(f"{name} ({kernel})", name, cpu, gpu, premise)


def _greedy_on_both(what: str, name: str, cpu, gpu, premise=None) -> None:
    """The prompt, then greedy steps, on both methods: the GPU's logits within 1e-5 of the CPU's scale and its
    tokens the CPU's; ``premise`` checked after the first call."""
    sequence, chunk = [], PROMPT
    for step in range(NEW_TOKENS):
        inputs = _inputs(name, chunk, len(sequence))
        expected = cpu.execute([x.clone() for x in inputs])[0]
        actual = gpu.execute([x.cuda() for x in inputs])[0]
        assert actual.is_cuda
        if step == 0 and premise is not None:
            premise()
        error = (actual.cpu() - expected).abs().max().item()
        scale = expected.abs().max().item()
        assert scale > 0 and error <= 1e-5 * scale, (
            f"{what}, {len(sequence) + len(chunk)} tokens: logits {error:.3g} off (scale {scale:.3g})")
        assert _last_argmax(actual.cpu()) == _last_argmax(expected)
        sequence += chunk
        chunk = [_last_argmax(expected)]


def _last_argmax(logits: torch.Tensor) -> int:
    return int(logits.reshape(-1, logits.shape[-1])[-1].argmax())


@pytest.mark.parametrize("name", NAMES[:2])
def test_8da4w_compiled_on_cuda_gives_the_cpus_tokens(name):
    """compile=True: the steps between the delegates compiled by TorchInductor, each delegate call one operator of
    the compiled code (executor/codegen/delegate_op.py), replayed in the CUDA graph captured around it. The
    logits stay within float32's tolerance of the CPU's and the greedy tokens are the CPU's. (ExecuTorch's
    ``export_llama`` programs stay uncompiled: their ``llama::update_cache`` takes a start position read on the
    host, which has no functional form.)"""
    pte = FIXTURES / "llm" / name / "program.pte"
    if not pte.exists():
        pytest.skip("no fixtures: run scripts/make-gpu-fixtures.py")
    cpu = pterun.Runtime.get().load_program(pte).load_method("forward")
    gpu = pterun.Runtime.get().load_program(pte, device="cuda", compile=True).load_method("forward")
    assert gpu.compile_status == "compiled", gpu.compile_status
    _greedy_on_both(f"{name} compiled", name, cpu, gpu)
    assert gpu.compile_status == "compiled", gpu.compile_status
    assert gpu._loaded.compiled_function.shapes, "premise: the one-token steps ran compiled code"
    assert gpu.cuda_graph is not None and gpu.cuda_graph.replaying, "premise: replayed in a CUDA graph"
