// et_vk.apply_rotary_emb_interleaved: x [B, N, C] as C/2 complex pairs (x[2k], x[2k+1]) per position,
// each multiplied by freqs [N, C] read as (cos, sin) pairs.
//
// params: 0 pairs, 1 N * C / 2 (pairs per batch)

@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read> F: array<f32>;
@group(0) @binding(3) var<storage, read_write> Y: array<f32>;

#include "_element.wgsl"

fn element(p: u32) {
  let f = p % pu(1u);
  let c = F[2u * f];
  let s = F[2u * f + 1u];
  let re = X[2u * p];
  let im = X[2u * p + 1u];
  Y[2u * p] = re * c - im * s;
  Y[2u * p + 1u] = re * s + im * c;
}
