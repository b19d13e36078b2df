"""SwiGLU gating, silu(gate) * up, as one dispatch (shaders/swiglu.wgsl).

Two operators land here: ``et_vk.swiglu.default`` (what newer exporters emit)
and ``silu_mul_fused``, which this backend's own fusion pass (fuse.py) makes
of the sigmoid/mul/mul chain ExecuTorch 1.5.1 leaves in the graph.
"""

from __future__ import annotations

from pterun.backends.webgpu.builder import NodeBuilder
from pterun.backends.webgpu.ops.common import broadcast, broadcast_params, grid, require_f32
from pterun.backends.webgpu.slots import TSlot

FUSED = "silu_mul_fused"
EXPORTED = "et_vk.swiglu.default"


def swiglu(b: NodeBuilder, gate: TSlot, up: TSlot, out_vid: int) -> TSlot:
    require_f32(b, gate, up)
    # The output shape depends on both operands; reading both through the builder registers
    # this node's resize hook on each of them.
    y = b.out(out_vid, lambda: broadcast(gate.shape, up.shape))

    def params():
        return broadcast_params(y.shape, (gate.shape, up.shape))

    b.dispatch("swiglu", {}, [gate, up, y], params, lambda: grid(y.numel))
    return y


def build_swiglu(b: NodeBuilder, op) -> None:
    swiglu(b, b.tensor(op.args[0]), b.tensor(op.args[1]), op.args[-1])


OPS = {FUSED: build_swiglu, EXPORTED: build_swiglu}
