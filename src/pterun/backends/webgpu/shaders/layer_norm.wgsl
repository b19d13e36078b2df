// Layer norm over the trailing `row length` elements: the mean, then the
// variance about it (two passes, as the reference computes it), then
// y = (x - mean) * rstd * weight + bias, with each row's mean and rstd as
// extra outputs. A row per invocation or per workgroup (_rows.wgsl).
//
// params: 0 rows, 1 row length, 2 eps bits, 3 has weight, 4 has bias

@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read> W: array<f32>;
@group(0) @binding(3) var<storage, read> BI: array<f32>;
@group(0) @binding(4) var<storage, read_write> Y: array<f32>;
@group(0) @binding(5) var<storage, read_write> MEAN: array<f32>;
@group(0) @binding(6) var<storage, read_write> RSTD: array<f32>;

#include "_rows.wgsl"

fn write_row(row: u32, base: u32, D: u32, first: u32, step: u32, mean: f32, rstd: f32) {
  let has_w = pu(3u) != 0u;
  let has_b = pu(4u) != 0u;
  for (var j = first; j < D; j += step) {
    var v = (X[base + j] - mean) * rstd;
    if (has_w) {
      v *= W[j];
    }
    if (has_b) {
      v += BI[j];
    }
    Y[base + j] = v;
  }
  if (first == 0u) {
    MEAN[row] = mean;
    RSTD[row] = rstd;
  }
}

fn serial_row(row: u32) {
  let D = pu(1u);
  let base = row * D;
  var s = 0.0;
  for (var j = 0u; j < D; j++) {
    s += X[base + j];
  }
  let mean = s / f32(D);
  var q = 0.0;
  for (var j = 0u; j < D; j++) {
    let d = X[base + j] - mean;
    q += d * d;
  }
  write_row(row, base, D, 0u, 1u, mean, 1.0 / sqrt(q / f32(D) + pf(2u)));
}

fn shared_row(row: u32, lid: u32) {
  let D = pu(1u);
  let base = row * D;
  var s = 0.0;
  for (var j = lid; j < D; j += 64u) {
    s += X[base + j];
  }
  let mean = workgroup_sum(lid, s) / f32(D);
  var q = 0.0;
  for (var j = lid; j < D; j += 64u) {
    let d = X[base + j] - mean;
    q += d * d;
  }
  let rstd = 1.0 / sqrt(workgroup_sum(lid, q) / f32(D) + pf(2u));
  write_row(row, base, D, lid, 64u, mean, rstd);
}
