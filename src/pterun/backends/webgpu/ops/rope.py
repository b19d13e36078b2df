"""et_vk.apply_rotary_emb: rotary embeddings of queries and keys (shaders/rope.wgsl, one dispatch each);
et_vk.apply_rotary_emb_interleaved (shaders/rope_interleaved.wgsl)."""

from __future__ import annotations

from pterun.backends.webgpu.builder import NodeBuilder
from pterun.backends.webgpu.ops.common import grid
from pterun.backends.webgpu.slots import TSlot
from pterun.errors import DelegateInvalidCompatibility, InvalidArgument


def _rotate(b: NodeBuilder, x: TSlot, cos: TSlot, sin: TSlot, out_vid: int) -> None:
    y = b.out(out_vid, lambda: x.shape)

    def params():
        if x.ndim != 4 or x.shape[-1] % 2:
            raise InvalidArgument(f"apply_rotary_emb: input {list(x.shape)} is not [B, S, H, D] with D even")
        _, s, h, d = x.shape
        half = d // 2
        per_head = cos.ndim == 3
        want = (s, h, half) if per_head else (s, half)
        if tuple(cos.shape) != want or tuple(sin.shape) != want:
            raise InvalidArgument(
                f"apply_rotary_emb: frequencies {list(cos.shape)} for input {list(x.shape)}"
            )
        return [x.numel // 2, s, h, half, int(per_head)]

    b.dispatch("rope", {}, [x, cos, sin, y], params, lambda: grid(x.numel // 2))


def build_rope(b: NodeBuilder, op) -> None:
    args = op.args
    xq, xk, cos, sin = (b.tensor(a) for a in args[:4])
    if any(t.elem != "f32" for t in (xq, xk, cos, sin)):
        raise DelegateInvalidCompatibility("et_vk.apply_rotary_emb: only float32 is supported")
    outs = b.outputs(args[-1])
    if len(outs) != 2:
        raise DelegateInvalidCompatibility("et_vk.apply_rotary_emb must return two tensors")
    _rotate(b, xq, cos, sin, outs[0])
    _rotate(b, xk, cos, sin, outs[1])


def build_rope_interleaved(b: NodeBuilder, op) -> None:
    x, freqs = b.tensor(op.args[0]), b.tensor(op.args[1])
    if x.elem != "f32" or freqs.elem != "f32" or x.ndim != 3:
        raise DelegateInvalidCompatibility(f"{op.name}: needs a float32 [B, N, C] input")

    def pairs_per_batch():
        _, n, c = x.shape
        if c % 2 or freqs.numel != n * c:
            raise InvalidArgument(f"{op.name}: frequencies {list(freqs.shape)} for input {list(x.shape)}")
        return n * c // 2

    y = b.out(op.args[-1], lambda: x.shape)
    b.dispatch("rope_interleaved", {}, [x, freqs, y], lambda: [x.numel // 2, pairs_per_batch()],
               lambda: grid(x.numel // 2))


OPS = {
    "et_vk.apply_rotary_emb.default": build_rope,
    "et_vk.apply_rotary_emb_interleaved.default": build_rope_interleaved,
}
