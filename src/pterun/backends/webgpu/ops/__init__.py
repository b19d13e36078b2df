"""Operator builders by the name the exporter writes into ``OperatorCall.name``.

One module per family, each with its kernels under ``shaders/``. A builder
declares a node's outputs, dependencies and dispatches through
:class:`~pterun.backends.webgpu.builder.NodeBuilder`.
"""

from __future__ import annotations

from pterun.backends.webgpu.ops import (
    attention,
    conv,
    creation,
    elementwise,
    embedding,
    gather,
    linear,
    norm,
    pool,
    qconv,
    qlinear,
    quantized,
    reduce,
    rope,
    sampling,
    shape,
    softmax,
    swiglu,
    symint,
    training,
)

BUILDERS = {}
for _family in (
    attention,
    elementwise,
    creation,
    shape,
    linear,
    norm,
    softmax,
    rope,
    sampling,
    embedding,
    gather,
    conv,
    pool,
    qconv,
    qlinear,
    quantized,
    reduce,
    swiglu,
    symint,
    training,
):
    BUILDERS.update(_family.OPS)

__all__ = ["BUILDERS"]
