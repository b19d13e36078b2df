// et_vk.embedding_q4gsw: out[r, d] = (w4[index[r], d] - 8) * scale[index[r], d / group]: a table of 4-bit
// rows, two values a byte (the even d in the high nibble, or the low one for a linear layer's weight),
// scales per group of d. An index outside the table reads zeros.
//
// params: 0 numel, 1 D, 2 rows in the table, 3 bytes per row, 4 group, 5 scales per row, 6 low nibble first

@group(0) @binding(1) var<storage, read> W: array<u32>;
@group(0) @binding(2) var<storage, read> S: array<f32>;
@group(0) @binding(3) var<storage, read> I: array<i32>;
@group(0) @binding(4) var<storage, read_write> Y: array<f32>;

#include "_element.wgsl"

fn element(i: u32) {
  let D = pu(1u);
  let d = i % D;
  let r = I[i / D];
  if (r < 0 || u32(r) >= pu(2u)) {
    Y[i] = 0.0;
    return;
  }
  let byte_at = u32(r) * pu(3u) + d / 2u;
  let b = (W[byte_at >> 2u] >> ((byte_at & 3u) * 8u)) & 255u;
  let even = (d & 1u) == 0u;
  let high = select(even, !even, pu(6u) != 0u);
  let q = i32(select(b & 15u, b >> 4u, high)) - 8;
  Y[i] = f32(q) * S[u32(r) * pu(5u) + d / pu(4u)];
}
