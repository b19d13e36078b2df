// native_group_norm: for each (n, group), mean and biased variance of its C/G channels x HxW values,
// rstd = 1 / sqrt(var + eps), out = (x - mean) * rstd * weight[c] + bias[c]. One invocation per group,
// two passes in order.
//
// params: 0 N * G, 1 channels per group, 2 HxW, 3 eps bits, 4 has weight, 5 has bias, 6 G

@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read> WEIGHT: array<f32>;
@group(0) @binding(3) var<storage, read> BIAS: array<f32>;
@group(0) @binding(4) var<storage, read_write> Y: array<f32>;
@group(0) @binding(5) var<storage, read_write> MEAN: array<f32>;
@group(0) @binding(6) var<storage, read_write> RSTD: array<f32>;

#include "_element.wgsl"

fn element(row: u32) {
  let cpg = pu(1u);
  let hw = pu(2u);
  let len = cpg * hw;
  let base = row * len;
  var sum = 0.0;
  for (var j = 0u; j < len; j++) {
    sum += X[base + j];
  }
  let mean = sum / f32(len);
  var sq = 0.0;
  for (var j = 0u; j < len; j++) {
    let d = X[base + j] - mean;
    sq += d * d;
  }
  let rstd = 1.0 / sqrt(sq / f32(len) + pf(3u));
  MEAN[row] = mean;
  RSTD[row] = rstd;
  let c0 = (row % pu(6u)) * cpg;
  for (var j = 0u; j < len; j++) {
    let c = c0 + j / hw;
    var v = (X[base + j] - mean) * rstd;
    if (pu(4u) != 0u) {
      v *= WEIGHT[c];
    }
    if (pu(5u) != 0u) {
      v += BIAS[c];
    }
    Y[base + j] = v;
  }
}
