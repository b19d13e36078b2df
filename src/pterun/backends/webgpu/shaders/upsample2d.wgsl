// 2-d upsampling of [..., H, W] to [..., OH, OW], as PyTorch's CPU kernels compute it.
// ${BILINEAR} false: nearest, source index min(floor(o * scale), size - 1) (o >> 1 at twice the size);
// true: bilinear, source position scale * o (align corners) or max(scale * (o + 0.5) - 0.5, 0), weights
// from its fraction, h first then w.
//
// params: 0 numel, 1 H, 2 W, 3 OH, 4 OW, 5 h scale bits, 6 w scale bits, 7 align corners

const BILINEAR: bool = ${BILINEAR};

@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;

#include "_element.wgsl"

fn nearest(o: u32, size: u32, out: u32, scale: f32) -> u32 {
  if (out == size) {
    return o;
  }
  if (out == 2u * size) {
    return o >> 1u;
  }
  return min(u32(floor(f32(o) * scale)), size - 1u);
}

fn source(o: u32, scale: f32) -> f32 {
  if (pu(7u) != 0u) {
    return scale * f32(o);
  }
  return max(scale * (f32(o) + 0.5) - 0.5, 0.0);
}

fn element(i: u32) {
  let H = pu(1u);
  let W = pu(2u);
  let OH = pu(3u);
  let OW = pu(4u);
  let ow = i % OW;
  let oh = (i / OW) % OH;
  let base = (i / (OW * OH)) * H * W;
  if (!BILINEAR) {
    Y[i] = X[base + nearest(oh, H, OH, pf(5u)) * W + nearest(ow, W, OW, pf(6u))];
    return;
  }
  let sh = source(oh, pf(5u));
  let sw = source(ow, pf(6u));
  let h0 = u32(sh);
  let w0 = u32(sw);
  let h1 = h0 + select(0u, 1u, h0 < H - 1u);
  let w1 = w0 + select(0u, 1u, w0 < W - 1u);
  let lh1 = sh - f32(h0);
  let lw1 = sw - f32(w0);
  let lh0 = 1.0 - lh1;
  let lw0 = 1.0 - lw1;
  Y[i] = lh0 * (lw0 * X[base + h0 * W + w0] + lw1 * X[base + h0 * W + w1])
       + lh1 * (lw0 * X[base + h1 * W + w0] + lw1 * X[base + h1 * W + w1]);
}
