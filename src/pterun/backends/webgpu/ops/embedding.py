"""aten.embedding: a row gather (shaders/embedding.wgsl)."""

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


OPS = {"aten.embedding.default": build_embedding}
