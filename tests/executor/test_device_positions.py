"""Start positions kept on the device (executor/load/fuse/positions.py), forced on the CPU: the rewritten method has
no host read and computes what the method as exported computes, step by step over a prompt and a generation."""

from __future__ import annotations

import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401 - llama:: ops, for the export below
import pytest
import torch

import pterun
from pterun.errors import InvalidArgument
from pterun.executor.load.effects import MethodEffects
from pterun.executor.load.fuse.positions import READS
from pterun.kernels.llm.attention import custom_sdpa
from pterun.kernels.llm.positions import custom_sdpa_at, slice_at, update_cache_at
from tests.support.exporting import ExportSpec
from tests.support.llm_programs import example_program, llama_program
from tests.support.premises import export_calling

_REWRITTEN = {"pterun::update_cache_at.out", "pterun::custom_sdpa_at.out"}


def _pair(pte):
    runtime = pterun.Runtime.get()
    rewritten = runtime.load_program(pte, device_positions=True).load_method("forward")
    exported = runtime.load_program(pte, device_positions=False).load_method("forward")
    return rewritten, exported


def _names(method) -> list[str]:
    return [s.name for s in method.steps if s is not None and hasattr(s, "binding")]


def _syncs(method) -> bool:
    return MethodEffects(method.plan, list(method.steps), {}).syncs


def _assert_rewritten(rewritten, exported):
    assert _syncs(exported) and READS & set(_names(exported)), "premise: the program reads its position on the host"
    names = set(_names(rewritten))
    assert _REWRITTEN <= names and not READS & names, sorted(names)
    assert not _syncs(rewritten), "no step of the rewritten method synchronizes with the host"
    assert "(llama::update_cache.out, aten::_local_scalar_dense)" in rewritten.source


def _last_logits(outputs) -> torch.Tensor:
    logits = outputs[0]
    return logits.reshape(-1, logits.shape[-1])[-1].clone()


@pytest.mark.parametrize("which", ["example", "dynamic", "static"])
def test_generation_with_positions_on_the_device_matches_the_host_reads(which):
    program = example_program() if which == "example" else llama_program(which)
    rewritten, exported = _pair(program.pte)
    _assert_rewritten(rewritten, exported)
    if which != "static":
        assert "pterun::slice_at.out" in _names(rewritten), "the RoPE rows are gathered at the device position"
    prompt = [1, 17, 42, 9, 23, 5, 61]
    # The static program takes one token per call: its prompt goes in token by token.
    calls = [(prompt, 0)] if program.dynamic else [([t], i) for i, t in enumerate(prompt)]
    position, steps = len(prompt), 0
    while steps < 40:
        for tokens, start in calls:
            inputs = [torch.tensor([tokens]), torch.tensor([start])]
            got = _last_logits(rewritten.execute([x.clone() for x in inputs]))
            want = _last_logits(exported.execute([x.clone() for x in inputs]))
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
            assert int(got.argmax()) == int(want.argmax())
        calls = [([int(want.argmax())], position)]
        position, steps = position + 1, steps + 1


class _CachedAttention(torch.nn.Module):
    """ExecuTorch's KV cache and attention as its Llama export arranges them; ``also`` uses the position once
    more, as none of the operators that take a start position."""

    def __init__(self, also: bool):
        super().__init__()
        self.also = also
        self.register_buffer("k_cache", torch.zeros(1, 16, 2, 8))
        self.register_buffer("v_cache", torch.zeros(1, 16, 2, 8))

    def forward(self, q, k, v, input_pos):
        start_pos = input_pos[0].item()
        torch._check(start_pos >= 0)
        torch._check(start_pos < 12)
        torch.ops.llama.update_cache(k, self.k_cache, start_pos)
        torch.ops.llama.update_cache(v, self.v_cache, start_pos)
        out = torch.ops.llama.custom_sdpa(q, self.k_cache, self.v_cache, start_pos, None, 0.0, True)
        return out * (start_pos + 1) if self.also else out


def _attention_program(also: bool):
    seq = torch.export.Dim("seq", min=1, max=4)
    inputs = (torch.randn(1, 3, 4, 8), torch.randn(1, 3, 2, 8), torch.randn(1, 3, 2, 8), torch.tensor([0]))
    return export_calling(
        f"llm-position-{'used-elsewhere' if also else 'cached-attention'}-v1",
        lambda: ExportSpec(_CachedAttention(also), inputs, dynamic_shapes=({1: seq}, {1: seq}, {1: seq}, None)),
        {"llama::update_cache.out", "llama::custom_sdpa.out"},
    )


def _run_both(rewritten, exported):
    position = 0
    for step, length in enumerate((3, 1, 1, 2, 1)):
        torch.manual_seed(step)
        inputs = [torch.randn(1, length, 4, 8), torch.randn(1, length, 2, 8), torch.randn(1, length, 2, 8),
                  torch.tensor([position])]
        got = rewritten.execute([x.clone() for x in inputs])[0]
        torch.testing.assert_close(got, exported.execute([x.clone() for x in inputs])[0], rtol=1e-5, atol=1e-6)
        position += length


def test_cache_and_attention_take_the_position_on_the_device():
    rewritten, exported = _pair(_attention_program(also=False).pte)
    _assert_rewritten(rewritten, exported)
    _run_both(rewritten, exported)


def test_a_position_used_by_anything_else_is_read_as_exported():
    rewritten, exported = _pair(_attention_program(also=True).pte)
    assert READS & set(_names(exported)), "premise: the program reads its position on the host"
    assert _names(rewritten) == _names(exported) and _syncs(rewritten)
    assert not _REWRITTEN & set(_names(rewritten))
    _run_both(rewritten, exported)


def test_default_rewrites_only_on_cuda():
    method = pterun.Runtime.get().load_program(example_program().pte).load_method("forward")
    assert READS & set(_names(method)) and not _REWRITTEN & set(_names(method))


def test_kernels_at_a_tensor_position_equal_the_host_position_kernels():
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 3, 4, 8), torch.randn(1, 16, 2, 8), torch.randn(1, 16, 2, 8)
    for causal in (True, False):
        want, got = torch.empty(0), torch.empty(0)
        custom_sdpa(q, k, v, 5, None, 0.0, causal, None, want)
        custom_sdpa_at(q, k, v, torch.tensor([5]), None, 0.0, causal, None, got)
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    table = torch.randn(16, 6)
    out = torch.empty(0)
    slice_at(table, 0, torch.tensor(4), 3, out)
    assert torch.equal(out, table[4:7])
    cache = torch.zeros(1, 16, 2, 8)
    update_cache_at(k[:, :2], cache, torch.tensor([14]), torch.empty(0))
    assert torch.equal(cache[:, 14:], k[:, :2]) and not cache[:, :14].any()
    with pytest.raises(InvalidArgument, match="do not fit"):
        update_cache_at(k[:, :3], cache, torch.tensor([14]), torch.empty(0))
    with pytest.raises(InvalidArgument, match="exceeds"):
        custom_sdpa_at(q, k, v, torch.tensor([14]), None, 0.0, True, None, torch.empty(0))


def test_the_runner_generates_the_same_text_with_positions_on_the_device():
    from pterun.llm import GenerationConfig, TextLLMRunner

    program = example_program()
    texts = []
    for device_positions in (True, False):
        runner = TextLLMRunner(program.pte, program.tokenizer, device_positions=device_positions)
        pieces: list[str] = []
        for prompt in ("The river runs", "Once upon a time"):
            runner.generate(prompt, GenerationConfig(temperature=0.0, echo=False, max_new_tokens=40),
                            token_callback=pieces.append)
            runner.reset()  # the second prompt overwrites the cache from 0; the mask hides what is left
        if device_positions:
            assert "pterun::custom_sdpa_at.out" in _names(runner.decoder.method), "premise: rewritten"
        texts.append(pieces)
    assert len(texts[0]) > 10 and texts[0] == texts[1]
