"""pterun.llm on a CUDA device: the bundled example LLM generates on the GPU exactly what it generates on the CPU,
with its KV cache in device memory."""

from __future__ import annotations

import pytest
import torch

from pterun.cli.options import example_llm
from pterun.executor.load.steps import KernelStep
from pterun.llm import GenerationConfig, TextLLMRunner

pytestmark = pytest.mark.gpu


def _pieces(runner, prompt, **config):
    pieces = []
    runner.generate(prompt, GenerationConfig(**config), token_callback=pieces.append)
    return pieces


def test_greedy_generation_on_cuda_is_the_cpus():
    program, tokenizer = example_llm()
    cpu, gpu = TextLLMRunner(str(program), str(tokenizer)), TextLLMRunner(str(program), str(tokenizer), device="cuda")
    for prompt in ("The river runs", "Once upon a time"):
        expected = _pieces(cpu, prompt, temperature=0.0, echo=False, max_new_tokens=40)
        assert len(expected) > 5, "premise: the CPU generated text"
        assert _pieces(gpu, prompt, temperature=0.0, echo=False, max_new_tokens=40) == expected
        cpu.reset(), gpu.reset()
    method = gpu.decoder.method
    values = [method.value(i) for i in range(len(method.plan.values))]
    buffers = [t for t in values if isinstance(t, torch.Tensor) and t.dim() == 4]
    assert buffers and all(t.is_cuda for t in buffers), "the KV cache stays in device memory"
    # The exporter reads the start position on the host; on the GPU it stays on the device, so decode steps
    # replay a captured graph.
    _assert_replays(gpu)


def _assert_replays(runner):
    method = runner.decoder.method
    steps = [s for s in method.steps if isinstance(s, KernelStep)]
    assert "pterun::custom_sdpa_at.out" in {s.name for s in steps}, "premise: the position stays on the device"
    assert not any(s.binding.syncs for s in steps), "no step reads a tensor on the host"
    graph = method.cuda_graph
    assert graph is not None and graph.failure is None and graph.replaying


@pytest.mark.parametrize("name", ["transformers-static-cache", "llama-dynamic"])
def test_exported_llms_on_cuda_generate_the_cpus_tokens(name):
    from tests.gpu.conftest import FIXTURES

    directory = FIXTURES / "llm" / name
    if not directory.exists():
        pytest.skip("no fixtures: run scripts/make-gpu-fixtures.py")
    program, tokenizer = str(directory / "program.pte"), str(directory / "tokenizer.json")
    cpu, gpu = TextLLMRunner(program, tokenizer), TextLLMRunner(program, tokenizer, device="cuda")
    expected = _pieces(cpu, "The river runs", temperature=0.0, echo=False, max_new_tokens=30)
    assert len(expected) > 5, "premise: the CPU generated text"
    assert _pieces(gpu, "The river runs", temperature=0.0, echo=False, max_new_tokens=30) == expected
    # Decode steps replay one captured graph, in every generation (the prefill between them drops it; it is
    # captured again). The transformers program's positions are tensors all the way; ExecuTorch's exporter reads
    # the position on the host (aten::_local_scalar_dense), which stays on the device instead (fuse/positions.py).
    graph = gpu.decoder.method.cuda_graph
    assert graph is not None and graph.failure is None and graph.replaying
    if name == "llama-dynamic":
        _assert_replays(gpu)
    gpu.reset()
    assert _pieces(gpu, "The river runs", temperature=0.0, echo=False, max_new_tokens=30) == expected
    assert graph.failure is None and graph.replaying


@pytest.mark.parametrize("options", [{}, {"compile": True}], ids=["plain", "compiled"])
def test_a_prompt_length_seen_before_replays_its_graph_every_time(options):
    """A prompt of a length seen before is eager, then captured, then replayed in every later generation. A
    compiled method's graph reads its inputs where the caller passes them, so the runner passes every prompt in
    the tensor it keeps (with a new tensor per prompt, a repeated length was captured, run eagerly when the
    address moved, captured again)."""
    from tests.gpu.conftest import FIXTURES

    name = "transformers-static-cache"

    directory = FIXTURES / "llm" / name
    if not directory.exists():
        pytest.skip("no fixtures: run scripts/make-gpu-fixtures.py")
    program, tokenizer = str(directory / "program.pte"), str(directory / "tokenizer.json")
    cpu, gpu = TextLLMRunner(program, tokenizer), TextLLMRunner(program, tokenizer, device="cuda", **options)
    expected = _pieces(cpu, "The river runs", temperature=0.0, echo=False, max_new_tokens=1)
    graphs = []
    for _ in range(5):
        gpu.reset()
        # One new token: the generation's last call is the prompt's.
        assert _pieces(gpu, "The river runs", temperature=0.0, echo=False, max_new_tokens=1) == expected
        runner = gpu.prefiller.method.cuda_graph
        assert runner.failure is None
        graphs.append(runner.graph)
    assert graphs[0] is None, "the first prompt runs eagerly"
    # Captured at the second generation; with compile=True the second compiles it (eagerly, outside a capture:
    # with no one-token steps between, the prompt's length came twice in a row) and the third captures it.
    first = 2 if options else 1
    assert all(g is None for g in graphs[:first]) and graphs[first] is not None, graphs
    assert all(g is graphs[first] for g in graphs[first:]), "captured once, then replayed"
    assert runner.replaying
    assert runner.plain is None, "a KV cache: a replay changes what the next call reads, so graphs are not timed"
