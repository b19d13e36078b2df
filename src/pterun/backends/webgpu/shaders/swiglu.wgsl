// out = silu(gate) * up in one pass (SwiGLU's gating), where the exported
// graph spells it sigmoid, mul, mul. Equal shapes take the direct path; a
// broadcast operand is walked by strides (modes as in binary.wgsl).
//
// params: 0 numel, 1 ndim, 2 modes (gate | up << 4),
//         8.. output sizes, 16.. gate strides, 24.. up strides

@group(0) @binding(1) var<storage, read> G: array<f32>;
@group(0) @binding(2) var<storage, read> U: array<f32>;
@group(0) @binding(3) var<storage, read_write> Y: array<f32>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = flat_id(gid, nwg, 64u);
  if (i >= pu(0u)) {
    return;
  }
  let modes = pu(2u);
  let mg = modes & 15u;
  let mu = (modes >> 4u) & 15u;
  var ig = select(0u, i, mg == 1u);
  var iu = select(0u, i, mu == 1u);
  if (mg == 0u || mu == 0u) {
    var rem = i;
    var og = 0u;
    var ou = 0u;
    for (var d = i32(pu(1u)) - 1; d >= 0; d--) {
      let k = u32(d);
      let size = pu(8u + k);
      let c = rem % size;
      rem = rem / size;
      og += c * pu(16u + k);
      ou += c * pu(24u + k);
    }
    if (mg == 0u) {
      ig = og;
    }
    if (mu == 0u) {
      iu = ou;
    }
  }
  let g = G[ig];
  // Same rounding as the unfused graph: sigmoid, then gate * sigmoid, then * up.
  let s = 1.0 / (1.0 + exp(-g));
  Y[i] = (g * s) * U[iu];
}
