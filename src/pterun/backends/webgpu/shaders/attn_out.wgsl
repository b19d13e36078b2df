// Attention output: out[row, d] = sum_j PROBS[row, j] * v[j, d], j in order, one invocation each (probs holds the
// softmax of attn_scores.wgsl's scores; rows and strides as there).
//
// params: 0 chunk rows * D, 1 ctx, 2 D, 3 S, 4 H, 5 group, 6..8 v strides (b, h, j), 9..11 out strides
//         (b, h, s), 12 first row of the chunk

@group(0) @binding(1) var<storage, read> PROBS: array<f32>;
@group(0) @binding(2) var<storage, read> V: array<f32>;
@group(0) @binding(3) var<storage, read_write> O: array<f32>;

#include "_element.wgsl"

fn element(i: u32) {
  let ctx = pu(1u);
  let D = pu(2u);
  let S = pu(3u);
  let H = pu(4u);
  let d = i % D;
  let row = pu(12u) + i / D;
  let s = row % S;
  let h = (row / S) % H;
  let b = row / (S * H);
  let v0 = b * pu(6u) + (h / pu(5u)) * pu(7u) + d;
  let p0 = (i / D) * ctx;
  var acc = 0.0;
  for (var j = 0u; j < ctx; j++) {
    acc += PROBS[p0 + j] * V[v0 + j * pu(8u)];
  }
  O[b * pu(9u) + h * pu(10u) + s * pu(11u) + d] = acc;
}
