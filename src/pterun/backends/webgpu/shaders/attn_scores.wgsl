// Attention scores: SCORES[row, j] = (q[row] . k[j]) * scale (+ mask[s, j]), one invocation each, where a row is
// one query position s of one head h of one batch b; -inf where the causal mask hides j (j > start + s).
// Query head h reads key head h / group (grouped-query attention). Operands are walked by strides, so
// [B, S, H, D] (llama's KV-cache layout) and [B, H, S, D] (et_vk.sdpa) both fit.
//
// Rows are computed in chunks (rows from `first`), so the scores of a long context fit one binding.
//
// params: 0 chunk rows * ctx, 1 ctx, 2 D, 3 S, 4 H, 5 group, 6 start, 7 causal, 8 scale bits, 9 has mask,
//         10..12 q strides (b, h, s), 13..15 k strides (b, h, j), 16..18 mask strides (b * H + h, s, j),
//         19 first row

@group(0) @binding(1) var<storage, read> Q: array<f32>;
@group(0) @binding(2) var<storage, read> K: array<f32>;
@group(0) @binding(3) var<storage, read> MASK: array<f32>;
@group(0) @binding(4) var<storage, read_write> SCORES: array<f32>;

#include "_element.wgsl"

fn element(i: u32) {
  let ctx = pu(1u);
  let D = pu(2u);
  let S = pu(3u);
  let H = pu(4u);
  let row = pu(19u) + i / ctx;
  let j = i % ctx;
  let s = row % S;
  let h = (row / S) % H;
  let b = row / (S * H);
  if (pu(7u) != 0u && j > pu(6u) + s) {
    SCORES[i] = bitcast<f32>(0xff800000u);
    return;
  }
  let q0 = b * pu(10u) + h * pu(11u) + s * pu(12u);
  let k0 = b * pu(13u) + (h / pu(5u)) * pu(14u) + j * pu(15u);
  var dot = 0.0;
  for (var d = 0u; d < D; d++) {
    dot += Q[q0 + d] * K[k0 + d];
  }
  var v = dot * pf(8u);
  if (pu(9u) != 0u) {
    v += MASK[(b * H + h) * pu(16u) + s * pu(17u) + j * pu(18u)];
  }
  SCORES[i] = v;
}
