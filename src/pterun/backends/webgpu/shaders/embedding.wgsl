// out[r, c] = weight[index[r], c]. An index outside the table reads zeros.
//
// params: 0 numel, 1 row length, 2 rows in the table

@group(0) @binding(1) var<storage, read> W: array<${T}>;
@group(0) @binding(2) var<storage, read> I: array<i32>;
@group(0) @binding(3) var<storage, read_write> Y: array<${T}>;

#include "_element.wgsl"

fn element(i: u32) {
  let D = pu(1u);
  let r = I[i / D];
  if (r < 0 || u32(r) >= pu(2u)) {
    Y[i] = ${T}(0);
    return;
  }
  Y[i] = W[u32(r) * D + i % D];
}
