// y = x / sqrt(mean(x^2) + eps) * weight over the last dimension, a row per
// invocation or per workgroup (_rows.wgsl).
//
// params: 0 rows, 1 row length, 2 eps bits

@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read> W: array<f32>;
@group(0) @binding(3) var<storage, read_write> Y: array<f32>;

#include "_rows.wgsl"

fn write_row(base: u32, D: u32, first: u32, step: u32, sum_sq: f32) {
  let r = 1.0 / sqrt(sum_sq / f32(D) + pf(2u));
  for (var j = first; j < D; j += step) {
    Y[base + j] = X[base + j] * r * W[j];
  }
}

fn serial_row(row: u32) {
  let D = pu(1u);
  let base = row * D;
  var s = 0.0;
  for (var j = 0u; j < D; j++) {
    let v = X[base + j];
    s += v * v;
  }
  write_row(base, D, 0u, 1u, s);
}

fn shared_row(row: u32, lid: u32) {
  let D = pu(1u);
  let base = row * D;
  var s = 0.0;
  for (var j = lid; j < D; j += 64u) {
    let v = X[base + j];
    s += v * v;
  }
  write_row(base, D, lid, 64u, workgroup_sum(lid, s));
}
