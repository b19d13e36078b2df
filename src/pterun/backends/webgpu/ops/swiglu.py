"""SwiGLU gating, silu(gate) * up, as one dispatch (shaders/swiglu.wgsl).

Two operators land here: ``et_vk.swiglu.default`` (what newer exporters emit)
and ``silu_mul_fused``, which this backend's own fusion pass (fuse.py) makes
of the sigmoid/mul/mul chain ExecuTorch 1.5.1 leaves in the graph.
"""

from __future__ import annotations

from pterun.backends.webgpu.builder import NodeBuilder
from pterun.backends.webgpu.ops.common import broadcast, broadcast_strides, grid, operand_mode, padded
from pterun.backends.webgpu.slots import TSlot
from pterun.errors import DelegateInvalidCompatibility

FUSED = "silu_mul_fused"
EXPORTED = "et_vk.swiglu.default"


def swiglu(b: NodeBuilder, gate: TSlot, up: TSlot, out_vid: int) -> TSlot:
    if gate.elem != "f32" or up.elem != "f32":
        raise DelegateInvalidCompatibility(f"{b.op.name}: only float32 is supported")
    # The output shape depends on both operands; reading both through the builder registers
    # this node's resize hook on each of them.
    y = b.out(out_vid, lambda: broadcast(gate.shape, up.shape))

    def params():
        shape = y.shape
        return [
            y.numel,
            len(shape),
            operand_mode(gate.shape, shape) | operand_mode(up.shape, shape) << 4,
            0,
            0,
            0,
            0,
            0,
            *padded(shape, 1),
            *padded(broadcast_strides(gate.shape, shape)),
            *padded(broadcast_strides(up.shape, shape)),
        ]

    b.dispatch("swiglu", {}, [gate, up, y], params, lambda: grid(y.numel))
    return y


def build_swiglu(b: NodeBuilder, op) -> None:
    swiglu(b, b.tensor(op.args[0]), b.tensor(op.args[1]), op.args[-1])


OPS = {FUSED: build_swiglu, EXPORTED: build_swiglu}
