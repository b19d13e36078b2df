"""aten.embedding: a row gather (shaders/embedding.wgsl); et_vk.embedding_q4gsw: the same from a table of
4-bit rows with group scales, unpacked as it is read (shaders/embedding_q4gsw.wgsl)."""

from __future__ import annotations

from pterun.backends.webgpu.builder import NodeBuilder
from pterun.backends.webgpu.ops.common import grid
from pterun.errors import DelegateInvalidCompatibility


def build_embedding(b: NodeBuilder, op) -> None:
    args = op.args
    w, idx = b.tensor(args[0]), b.tensor(args[1])
    if w.ndim != 2 or idx.elem != "i32":
        raise DelegateInvalidCompatibility("aten.embedding: needs a 2-d table and integer indices")
    y = b.out(args[-1], lambda: (*idx.shape, w.shape[1]))
    b.dispatch(
        "embedding",
        {"T": w.elem},
        [w, idx, y],
        lambda: [y.numel, w.shape[1], w.shape[0]],
        lambda: grid(y.numel),
    )


def build_embedding_q4gsw(b: NodeBuilder, op) -> None:
    args = op.args
    w = b.packed_constant(args[0])
    scales = b.tensor(args[1])
    group = int(b.scalar(args[2]))
    idx = b.tensor(args[3])
    linear = bool(b.scalar(args[4], False)) if len(args) > 5 else False
    if w.ndim != 2 or idx.elem != "i32" or scales.elem != "f32" or group <= 0:
        raise DelegateInvalidCompatibility(f"{op.name}: needs a 2-d 4-bit table, float scales, integer indices")
    rows, row_bytes = w.shape
    d = 2 * row_bytes
    per_row = scales.shape[-1] if scales.ndim > 1 else 0
    if scales.ndim > 1 and (scales.shape[0] != rows or per_row * group < d):
        raise DelegateInvalidCompatibility(f"{op.name}: scales {list(scales.shape)} for a [{rows}, {d}] table")
    y = b.out(args[-1], lambda: (*idx.shape, d))
    b.dispatch(
        "embedding_q4gsw",
        {},
        [w, scales, idx, y],
        lambda: [y.numel, d, rows, row_bytes, group, per_row, int(linear)],
        lambda: grid(y.numel),
    )


OPS = {
    "aten.embedding.default": build_embedding,
    "et_vk.embedding_q4gsw.default": build_embedding_q4gsw,
}
