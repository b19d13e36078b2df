"""Decomposed attention and RMSNorm run as one fused kernel each (executor/load/fuse/), against ExecuTorch."""

from __future__ import annotations

import math

import pytest
import torch
from torch.nn.functional import scaled_dot_product_attention

import pterun
from pterun.format import Dynamism, KernelCall
from tests.support.compare import assert_matches
from tests.support.differential import check, export_model, load, seeded
from tests.support.exporting import ExportSpec, export_program
from tests.support.models import build


def _fused(method: pterun.Method) -> list[str]:
    return [s.name for s in method.steps if getattr(s, "replaces", ())]


def _calls(method: pterun.Method, operator: str) -> int:
    plan = method.plan
    return sum(1 for ins in plan.instructions if isinstance(ins, KernelCall)
               and plan.operators[ins.op_index][0] == operator)


def test_llama_attention_and_rms_norm_fused():
    exported = export_model("llama", "portable")
    program = load(exported)
    method = program.load_method("forward")
    fused = _fused(method)
    # The premise: every softmax is one attention and every rsqrt one RMSNorm, and each was fused (on the CPU, those
    # a residual add feeds directly with the add: test_add_rms_norm.py).
    assert fused.count("pterun::attention") == _calls(method, "aten::_softmax") > 0
    assert fused.count("pterun::rms_norm") + fused.count("pterun::add_rms_norm") == _calls(method, "aten::rsqrt") > 0
    assert "pterun::attention (aten::mul.Scalar_out x2, aten::permute_copy.out" in method.source
    make_inputs = build("llama").make_inputs
    for seed in (0, 1):
        check(exported, make_inputs(seed), program=program)


def test_a_grouped_cache_is_read_by_the_attention_without_its_repeat():
    """transformers' static cache, 4 query heads sharing 2 of keys and values: the repeat of the cache for the
    query heads (unsqueeze, expand, clone) joins the fused attention, which reads the cache as it is; against
    ExecuTorch over a prompt and decode steps (the same steps on a GPU are tests/gpu/test_llm_on_cuda.py's)."""
    from tests.support.llm_programs import transformers_program
    from tests.support.oracle import reference_module

    pte = transformers_program().pte
    program = pterun.Runtime.get().load_program(pte)
    method = program.load_method("forward")
    fused = _fused(method)
    assert fused.count("pterun::grouped_attention") == _calls(method, "aten::_softmax") == 2
    # Two clones per layer repeat the cache; they are gone from the method's code, the others stay.
    clones = _calls(method, "dim_order_ops::_clone_dim_order")
    assert method.source.count("_clone_dim_order_out(") == clones - 4 >= 0
    reference = reference_module(pte)
    position = 0
    for tokens in ([[1, 5, 6, 7]], [[9]], [[3]]):
        ids = torch.tensor(tokens)
        positions = torch.arange(position, position + ids.shape[1])
        position += ids.shape[1]
        assert_matches(method.execute([ids, positions]), list(reference.run_method("forward", [ids, positions])))


def test_fuse_false_runs_the_chains_as_exported():
    exported = export_model("llama", "portable")
    method = pterun.Runtime.get().load_program(exported.pte, fuse=False).load_method("forward")
    assert _fused(method) == []
    assert "pterun::" not in method.source
    assert _calls(method, "aten::_softmax") > 0 and "softmax_out(" in method.source


class _Norms(torch.nn.Module):
    """Two RMSNorms and an attention with a mask that hides a whole row; the second norm's variance is
    also returned, so that chain must stay as it is."""

    def __init__(self) -> None:
        super().__init__()
        self.w1 = torch.nn.Parameter(torch.rand(16) + 0.5)
        self.w2 = torch.nn.Parameter(torch.rand(16) + 0.5)

    def forward(self, x, q, k, v, mask):
        y = self.w1 * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))
        var = y.pow(2).mean(-1, keepdim=True)
        z = self.w2 * (y * torch.rsqrt(var + 1e-5))
        return z, var, scaled_dot_product_attention(q, k, v, attn_mask=mask)


def test_a_chain_whose_intermediate_is_read_elsewhere_is_not_fused():
    mask = torch.ones(6, 6, dtype=torch.bool).tril()
    mask[2] = False  # row 2 sees nothing: ExecuTorch's safe softmax gives zeros there, as fused attention does
    inputs = (seeded(0, 3, 16), seeded(1, 1, 2, 6, 8), seeded(2, 1, 2, 6, 8), seeded(3, 1, 2, 6, 8), mask)
    exported = export_program("fuse-norms", lambda: ExportSpec(_Norms(), inputs))
    program = load(exported)
    method = program.load_method("forward")
    assert _calls(method, "aten::rsqrt") == 2
    assert sorted(_fused(method)) == ["pterun::attention", "pterun::rms_norm"]
    out = check(exported, inputs, program=program)
    assert torch.equal(out[2][0, :, 2], torch.zeros(2, 8))


def test_the_functional_form_calls_the_fused_kernels():
    exported = export_model("llama", "portable")
    method = pterun.Runtime.get().load_program(exported.pte, compile=True).load_method("forward")
    assert "pterun_attention(" in method.functional_source and "pterun_rms_norm(" in method.functional_source
    inputs = build("llama").make_inputs(0)
    expected = check(exported, inputs)
    with torch.inference_mode():
        actual = method.functional(*inputs)
    assert_matches(list(actual), expected)


class _DynamicNorm(torch.nn.Module):
    """RMSNorm over activations whose batch and length vary, in float32 or (as Hugging Face's Llama writes it)
    in half precision normalised in float32 between two casts."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter((torch.rand(16) + 0.5).to(dtype))

    def forward(self, x):
        wide = x.to(torch.float32)
        normed = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.weight * normed.to(x.dtype), x + 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16-casts"])
def test_rms_norm_of_dynamic_shape_is_fused(dtype):
    batch, length = torch.export.Dim("batch", max=4), torch.export.Dim("length", max=12)
    example = (seeded(0, 2, 5, 16).to(dtype),)
    exported = export_program(f"fuse-dynamic-norm-{dtype}".replace("torch.", ""), lambda: ExportSpec(
        _DynamicNorm(dtype), example, dynamic_shapes=({0: batch, 1: length},)))
    program = load(exported)
    method = program.load_method("forward")
    # The premise: the input is dynamic, and its one RMSNorm (with its casts, in half precision) became one call.
    assert method.plan.values[method.plan.inputs[0]].dynamism != Dynamism.STATIC
    assert _fused(method) == ["pterun::rms_norm"] and _calls(method, "aten::rsqrt") == 1
    # The float32 kernel sizes its out itself: no emptying before the call or stride fix after it, in every call;
    # the half-precision form ends in torch's product, whose out arrives emptied.
    fused_lines = [line for line in method.source.splitlines() if "# pterun::rms_norm" in line]
    sized_by_torch = any(".resize_(0)" in line for line in fused_lines)
    assert sized_by_torch == (dtype != torch.float32), fused_lines
    for seed, shape in enumerate([(2, 5, 16), (1, 1, 16), (4, 12, 16), (3, 7, 16)]):
        x = seeded(seed, *shape).to(dtype)
        out = check(exported, (x,), program=program)
        assert out[0].shape == shape and out[0].is_contiguous()


def test_a_float32_rms_norm_on_the_cpu_keeps_the_chains_bits():
    """The fused call runs the chain's own steps in float32 on the CPU, so its outputs are those of fuse=False bit
    for bit, over shapes that change from call to call and new values in the same bytes; and they are
    torch.rms_norm's."""
    from pterun.kernels import fused as kernels

    batch, length = torch.export.Dim("batch", max=4), torch.export.Dim("length", max=12)
    exported = export_program("fuse-dynamic-norm-float32", lambda: ExportSpec(
        _DynamicNorm(torch.float32), (seeded(0, 2, 5, 16),), dynamic_shapes=({0: batch, 1: length},)))
    fused = load(exported).load_method("forward")
    plain = pterun.Runtime.get().load_program(exported.pte, fuse=False).load_method("forward")
    # The premise: one fused call, to the kernel that runs the chain's steps, and none with fuse=False.
    assert _fused(fused) == ["pterun::rms_norm"] and _fused(plain) == []
    assert [type(s.binding.fn) for s in fused.steps if getattr(s, "name", "") == "pterun::rms_norm"] == [
        kernels.RmsNormInto]
    for seed, shape in enumerate([(2, 5, 16), (2, 5, 16), (1, 1, 16), (4, 12, 16), (2, 5, 16)]):
        x = seeded(seed, *shape) * (1 + 10 * seed)
        assert all(torch.equal(a, b) for a, b in zip(fused.execute([x]), plain.execute([x]))), shape
    kernel, out = kernels.RmsNormInto(), torch.empty(0)
    for seed, shape in enumerate([(1, 1, 768), (1, 1, 768), (3, 7, 2048), (5, 64), (2, 1000), (1, 40000)]):
        x, w = seeded(10 + seed, *shape) * (1 + seed), seeded(20 + seed, shape[-1])
        assert torch.equal(kernel(x, w, 1e-5, out=out), torch.rms_norm(x, (shape[-1],), w, 1e-5)), shape
        # The premise: one native call where the native kernels are built, but for rows torch splits over threads.
        assert (kernel._native is not None) == (shape[-1] < kernels._TORCH_GRAIN), shape
        expected = torch.rms_norm(x, (shape[-1],), w, 1e-5)
        assert torch.equal(kernel(x, w, 1e-5, out=x), expected), f"{shape}: written over x"


class _DynamicAttention(torch.nn.Module):
    def forward(self, q, k, v, mask):
        return scaled_dot_product_attention(q, k, v, attn_mask=mask)


def test_attention_over_a_dynamic_query_length_is_fused():
    length = torch.export.Dim("length", max=12)

    def inputs(seed: int, n: int) -> tuple:
        mask = torch.ones(n, 10, dtype=torch.bool).tril(4)
        mask[n // 2] = False  # a row that sees nothing: zeros, as the exporter's safe softmax makes it
        return (seeded(seed, 1, 2, n, 8), seeded(seed + 1, 1, 2, 10, 8), seeded(seed + 2, 1, 2, 10, 8), mask)

    exported = export_program("fuse-dynamic-attention", lambda: ExportSpec(
        _DynamicAttention(), inputs(0, 6), dynamic_shapes=({2: length}, None, None, {0: length})))
    program = load(exported)
    method = program.load_method("forward")
    # The premise: the query is dynamic, its attention was one chain, and the views between became part of it.
    assert method.plan.values[method.plan.inputs[0]].dynamism != Dynamism.STATIC
    assert _fused(method) == ["pterun::attention"] and _calls(method, "aten::_softmax") == 1
    assert "executorch_prim::et_view.default x3" in method.source
    for seed, n in enumerate([6, 1, 12, 3]):
        out = check(exported, inputs(seed, n), program=program)
        assert out[0].shape == (1, 2, n, 8) and torch.equal(out[0][0, :, n // 2], torch.zeros(2, 8))


@pytest.mark.parametrize("variant", ["dynamic", "xnnpack-8da4w"])
def test_rotary_embeddings_of_executorchs_llama_are_fused_bit_for_bit(variant):
    """ExecuTorch's Llama (export_llama) embeds positions in the queries and keys of every layer, each a chain of
    thirteen steps, the two interleaved; fused, they compute the same bits as the chain."""
    from pterun.kernels import fused as kernels
    from tests.support.llm_programs import llama_args, llama_program

    program = llama_program(variant)
    fused = pterun.Runtime.get().load_program(program.pte).load_method("forward")
    plain = pterun.Runtime.get().load_program(program.pte, fuse=False).load_method("forward")
    # The premise: one chain for the queries and one for the keys of each layer, all fused (on the CPU, where the
    # layer's attention over its cache follows them directly, taken into its call: test_cached_attention.py).
    names = _fused(fused)
    assert names.count("pterun::rotary") + 2 * names.count("pterun::cached_attention") == 2 * llama_args()["n_layers"]
    assert ("pterun::rotary (aten::slice_copy.Tensor_out x2, aten::squeeze_copy.dims_out x2" in fused.source
            or "pterun::rotary x2" in fused.source)
    tokens = torch.tensor([[3, 17, 25, 9, 41, 7]])
    calls = [(tokens, torch.tensor([0]))] + [(tokens[:, i:i + 1] + 1, torch.tensor([6 + i])) for i in range(4)]
    for call in calls:
        assert torch.equal(fused.execute(list(call))[0], plain.execute(list(call))[0])
    x, cos, sin = seeded(0, 1, 3, 4, 8, 2), seeded(1, 1, 3, 1, 8), seeded(2, 1, 3, 1, 8)
    out = torch.empty(0)
    assert torch.equal(kernels.RotaryInto()(x, cos, sin, out=out), kernels.rotary(x, cos, sin))


class _RotateHalf(torch.nn.Module):
    """transformers' apply_rotary_pos_emb: q * cos + rotate_half(q) * sin, the same for k."""

    def forward(self, q, k, cos, sin):
        def rotate_half(x):
            half = x.shape[-1] // 2
            return torch.cat((-x[..., half:], x[..., :half]), dim=-1)

        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_rotate_half_embeddings_are_fused_bit_for_bit(dtype):
    """transformers' rotary embedding, seven steps each for the queries and the keys over a dynamic length, runs as
    one call each with the chain's bits (ExecuTorch's, and pterun's with fuse=False); so does the fused kernel
    on a tensor read through strides (the queries as a projection's permuted view leaves them)."""
    from pterun.kernels import fused as kernels

    length = torch.export.Dim("length", max=12)
    example = (seeded(0, 1, 4, 6, 16), seeded(1, 1, 2, 6, 16), seeded(2, 1, 6, 16), seeded(3, 1, 6, 16))
    exported = export_program(f"fuse-rotate-half-{dtype}".replace("torch.", ""), lambda: ExportSpec(
        _RotateHalf(), tuple(t.to(dtype) for t in example),
        dynamic_shapes=({2: length}, {2: length}, {1: length}, {1: length})))
    program = load(exported)
    fused = program.load_method("forward")
    plain = pterun.Runtime.get().load_program(exported.pte, fuse=False).load_method("forward")
    assert _fused(fused) == ["pterun::rotate_half"] * 2, _fused(fused)
    assert "pterun::rotate_half (aten::mul.out x2, aten::slice_copy.Tensor_out x2, aten::neg.out" in fused.source
    for seed, length in enumerate((6, 1, 12)):
        args = [seeded(10 * seed + i, *shape).to(dtype) * 4 for i, shape in
                enumerate([(1, 4, length, 16), (1, 2, length, 16), (1, length, 16), (1, length, 16)])]
        ours = check(exported, args, program=program, rtol=0.0)
        assert all(torch.equal(a, b) for a, b in zip(ours, plain.execute(args)))
    x = seeded(5, 1, 6, 4, 16).to(dtype).transpose(1, 2)  # [1, 4, 6, 16] through strides
    cos, sin = seeded(6, 1, 1, 6, 16).to(dtype), seeded(7, 1, 1, 6, 16).to(dtype)
    assert torch.equal(kernels.RotateHalfInto()(x, cos, sin, out=torch.empty(0, dtype=dtype)),
                       kernels.rotate_half(x, cos, sin))


@pytest.mark.parametrize("form", ["rotary", "rotary-native", "rotate_half"])
def test_a_rotary_kernel_reads_new_values_in_the_bytes_it_kept_views_of(form):
    """The fused rotary calls keep their views of x (or the native call its arguments) for the bytes a method
    passes at every call: a new view of the same bytes holding new values, other bytes, the first bytes again
    and another shape each give the function's result. ``rotary``: torch's steps, which pairs read through
    strides take (a permuted view of a projection); ``rotary-native``: contiguous float32 pairs."""
    from pterun.kernels import fused as kernels

    kernel, function = ((kernels.RotateHalfInto(), kernels.rotate_half) if form == "rotate_half"
                        else (kernels.RotaryInto(), kernels.rotary))
    shape = (1, 3, 4, 8, 2) if form != "rotate_half" else (1, 4, 3, 16)
    table = (1, 3, 1, 8) if form != "rotate_half" else (1, 1, 3, 16)
    viewed = (lambda t: t.view(1, 4, 3, 8, 2).transpose(1, 2)) if form == "rotary" else (lambda t: t.view(shape))
    arena, other = torch.zeros(2 * math.prod(shape)), viewed(seeded(9, *shape))
    out = torch.empty(0)
    kept_state = (lambda: kernel._native) if form == "rotary-native" else (lambda: kernel._views)
    cos, sin = torch.empty(table), torch.empty(table)
    for step, x in enumerate((viewed(arena[:math.prod(shape)]), None, other, None)):
        if x is None:  # new values in the arena's bytes, through a view made anew
            arena[:math.prod(shape)] = seeded(20 + step, math.prod(shape))
            x = viewed(arena[:math.prod(shape)])
        if form == "rotary-native":  # a method passes the tables in the same bytes every call
            cos.copy_(seeded(30 + step, *table)), sin.copy_(seeded(40 + step, *table))
        else:
            cos, sin = seeded(30 + step, *table), seeded(40 + step, *table)
        kept = kept_state()
        assert torch.equal(kernel(x, cos, sin, out=out), function(x, cos, sin)), step
        assert (kept_state() is kept) == (step == 1), step  # the premise: kept for the same bytes only
        assert (getattr(kernel, "_native", None) is not None) == (form == "rotary-native"), "the premise: the way"
    longer = seeded(50, *shape[:1], 5, *shape[2:]) if form != "rotate_half" else seeded(50, 1, 4, 5, 16)
    cos, sin = (seeded(51, 1, 5, 1, 8), seeded(52, 1, 5, 1, 8)) if form != "rotate_half" else (
        seeded(51, 1, 1, 5, 16), seeded(52, 1, 1, 5, 16))
    assert torch.equal(kernel(longer, cos, sin, out=out), function(longer, cos, sin))


def test_tensors_apart_are_told_from_overlapping_ones():
    """``kernels.fused.apart``, which keeps the one-pass CUDA rotary kernel from writing bytes it reads: views of one
    arena (as planned tensors are) overlap where their spans do, strides and all."""
    from pterun.kernels.fused import apart

    arena = torch.zeros(100)
    x, y = arena[:40].view(4, 10), arena[40:80].view(4, 10)
    assert apart(x, y) and apart(y, x)
    assert not apart(x, arena[39:50]) and not apart(x, x.t()) and not apart(x, x)
    assert apart(arena[0:20:2], arena[19:30])  # a strided span ends at its last element
    assert not apart(arena[0:21:2], arena[20:30])
    assert apart(x, torch.zeros(4, 10)) and apart(x, arena[:0])


def test_one_query_attention_is_float32_products_and_a_safe_softmax():
    """The form a decode step's float32 attention takes on CUDA (kernels/fused.py), checked here on the CPU:
    within float32 rounding of a float64 reference and of PyTorch's fused kernel, a row the mask hides entirely
    zeros (the GPU suite checks the CUDA path and its compiled form)."""
    from pterun.kernels import fused as kernels

    q, k, v = seeded(1, 2, 12, 1, 64), seeded(2, 2, 12, 300, 64), seeded(3, 2, 12, 300, 64)
    mask = torch.zeros(2, 1, 1, 300)
    mask[0, ..., 200:] = -torch.inf
    mask[1] = -torch.inf
    scale = 64 ** -0.25
    got = kernels._one_query(q, k, v, scale * scale, mask)
    scores = (q.double() * scale) @ (k.double() * scale).transpose(-1, -2) + mask.double()
    expected = (torch.softmax(scores, -1).nan_to_num(0.0) @ v.double()).flatten(0, -3)
    assert torch.equal(got[12:], torch.zeros_like(got[12:])) and expected[:12].abs().max() > 0
    assert ((got.double() - expected).norm() / expected.norm()).item() < 1e-6
    fused = scaled_dot_product_attention(q[:1], k[:1], v[:1], attn_mask=mask[:1], scale=scale * scale)
    torch.testing.assert_close(got[:12], fused.flatten(0, -3), rtol=1e-5, atol=1e-6)


def test_one_query_over_a_grouped_cache_is_the_repeated_caches_attention():
    """The CUDA decode step's grouped forms (kernels/fused.py), checked here on the CPU: each cached head in
    bfloat16 read once for its 3 query heads gives the attention over the cache cast and repeated, within float32
    rounding (the products' rows are grouped, or summed as reductions), and a row the mask hides entirely is
    zeros."""
    from pterun.kernels import fused as kernels

    q = seeded(1, 2, 12, 1, 64)
    k, v = seeded(2, 2, 4, 300, 64).to(torch.bfloat16), seeded(3, 2, 4, 300, 64).to(torch.bfloat16)
    mask = torch.zeros(2, 1, 1, 300)
    mask[0, ..., 200:] = -torch.inf
    mask[1] = -torch.inf
    scale = 64 ** -0.25
    repeated = [x.float().repeat_interleave(3, dim=1) for x in (k, v)]
    assert torch.equal(repeated[0][:, 4], k[:, 1].float())  # the premise: head h reads cached head h // 3
    expected = kernels._one_query(q, *repeated, scale * scale, mask)
    assert expected[:12].abs().max() > 0
    # Its products, and the reductions torch.compile is given instead (grouped_attention_traced).
    for got in (kernels._one_query_grouped(q, k, v, scale * scale, mask, 3),
                kernels._one_query_reduced(q, k, v, scale * scale, mask, 3)):
        assert torch.equal(got[12:], torch.zeros_like(got[12:]))
        torch.testing.assert_close(got, expected, rtol=1e-6, atol=1e-6)
    # On the CPU, PyTorch's kernel over the shared heads: exactly the attention over the repeated cache, for one
    # query and for a prompt's.
    assert torch.equal(kernels.grouped_attention(q, k, v, scale, scale, mask),
                       kernels.attention(q, *repeated, scale, scale, mask))
    prompt = seeded(4, 2, 12, 5, 64)
    assert torch.equal(kernels.grouped_attention(prompt, k, v, scale, scale, mask),
                       kernels.attention(prompt, *repeated, scale, scale, mask))
