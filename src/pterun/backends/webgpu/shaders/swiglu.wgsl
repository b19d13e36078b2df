// out = silu(gate) * up in one pass (SwiGLU's gating), where the exported
// graph spells it sigmoid, mul, mul. Operands are addressed as
// _broadcast.wgsl says: equal shapes take the direct path.
//
// params: 0 numel, 1 ndim, 2 modes (gate | up << 4),
//         8.. output sizes, 16.. gate strides, 24.. up strides

@group(0) @binding(1) var<storage, read> G: array<f32>;
@group(0) @binding(2) var<storage, read> U: array<f32>;
@group(0) @binding(3) var<storage, read_write> Y: array<f32>;

#include "_element.wgsl"
#include "_broadcast.wgsl"

fn element(i: u32) {
  let at = operand_indices(i, 2u);
  let g = G[at.x];
  // Same rounding as the unfused graph: sigmoid, then gate * sigmoid, then * up.
  let s = 1.0 / (1.0 + exp(-g));
  Y[i] = (g * s) * U[at.y];
}
