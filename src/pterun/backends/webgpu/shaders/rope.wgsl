// Rotary position embedding on interleaved pairs: x is [..., S, H, D] viewed
// as D/2 complex numbers (x[2j], x[2j+1]) and each is rotated by the angle
// whose cos/sin are freqs[s, j] (or freqs[s, h, j] for per-head tables).
//
// params: 0 pairs, 1 S, 2 H, 3 D/2, 4 per-head tables

@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read> COS: array<f32>;
@group(0) @binding(3) var<storage, read> SIN: array<f32>;
@group(0) @binding(4) var<storage, read_write> Y: array<f32>;

#include "_element.wgsl"

fn element(p: u32) {
  let S = pu(1u);
  let H = pu(2u);
  let half = pu(3u);
  let j = p % half;
  let h = (p / half) % H;
  let s = (p / (half * H)) % S;
  var f = s * half + j;
  if (pu(4u) != 0u) {
    f = (s * H + h) * half + j;
  }
  let c = COS[f];
  let sn = SIN[f];
  let re = X[2u * p];
  let im = X[2u * p + 1u];
  Y[2u * p] = re * c - im * sn;
  Y[2u * p + 1u] = re * sn + im * c;
}
