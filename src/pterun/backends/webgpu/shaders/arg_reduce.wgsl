// argmax / argmin along one dimension: out[o] = the first index along the dimension of the largest
// (smallest) value; a NaN counts as the largest and the smallest, as PyTorch's kernels have it.
// A row is `length` elements `inner` apart.
//
// params: 0 rows, 1 length, 2 inner

const MAX: bool = ${MAX};

@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read_write> Y: array<i32>;

#include "_element.wgsl"

fn element(row: u32) {
  let L = pu(1u);
  let inner = pu(2u);
  let base = (row / inner) * L * inner + row % inner;
  var best = X[base];
  var at = 0u;
  for (var j = 1u; j < L; j++) {
    let v = X[base + j * inner];
    if (best != best) {
      break;
    }
    let better = select((v < best), (v > best), MAX);
    if (better || v != v) {
      best = v;
      at = j;
    }
  }
  Y[row] = i32(at);
}
