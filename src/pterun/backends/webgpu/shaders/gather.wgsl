// Gathers along one dimension by an index tensor of any shape: x viewed as
// [outer, D, inner] and the index flattened to J entries give an output
// [outer, J, inner]. Negative indices count from the end; out-of-range ones
// read zeros.
//
// params: 0 numel, 1 D, 2 inner, 3 J

@group(0) @binding(1) var<storage, read> X: array<${T}>;
@group(0) @binding(2) var<storage, read> I: array<i32>;
@group(0) @binding(3) var<storage, read_write> Y: array<${T}>;

#include "_element.wgsl"

fn element(i: u32) {
  let D = pu(1u);
  let inner = pu(2u);
  let J = pu(3u);
  let e = i % inner;
  let j = (i / inner) % J;
  let o = i / (inner * J);
  var k = I[j];
  if (k < 0) {
    k += i32(D);
  }
  if (k < 0 || u32(k) >= D) {
    Y[i] = ${T}(0);
    return;
  }
  Y[i] = X[(o * D + u32(k)) * inner + e];
}
