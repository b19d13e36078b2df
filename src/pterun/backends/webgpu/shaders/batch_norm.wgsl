// Inference batch norm: y = (x - mean[c]) / sqrt(var[c] + eps) * weight[c] + bias[c],
// c being the index along dimension 1.
//
// params: 0 numel, 1 channels, 2 elements per channel plane, 3 eps bits,
//         4 has weight, 5 has bias

@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read> W: array<f32>;
@group(0) @binding(3) var<storage, read> BI: array<f32>;
@group(0) @binding(4) var<storage, read> MEAN: array<f32>;
@group(0) @binding(5) var<storage, read> VAR: array<f32>;
@group(0) @binding(6) var<storage, read_write> Y: array<f32>;

#include "_element.wgsl"

fn element(i: u32) {
  let c = (i / pu(2u)) % pu(1u);
  var v = (X[i] - MEAN[c]) / sqrt(VAR[c] + pf(3u));
  if (pu(4u) != 0u) {
    v *= W[c];
  }
  if (pu(5u) != 0u) {
    v += BI[c];
  }
  Y[i] = v;
}
