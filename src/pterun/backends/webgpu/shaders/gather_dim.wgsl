// aten.gather: out[i] = x at out's coordinates with the one along `dim` replaced by index[i]; out has
// the index's shape. The walk is _broadcast.wgsl's: x strides at 16.. (0 along dim); an index outside
// the dimension reads zero.
//
// params: 0 numel, 1 rank, 2 unused, 3 x's stride along dim, 4 x's size along dim, 8.. sizes, 16.. strides

@group(0) @binding(1) var<storage, read> X: array<${T}>;
@group(0) @binding(2) var<storage, read> I: array<i32>;
@group(0) @binding(3) var<storage, read_write> Y: array<${T}>;

#include "_element.wgsl"
#include "_broadcast.wgsl"

fn element(i: u32) {
  let at = strided_offsets(i).x;
  let k = I[i];
  if (k < 0 || u32(k) >= pu(4u)) {
    Y[i] = ${T}(0);
    return;
  }
  Y[i] = X[at + u32(k) * pu(3u)];
}
