// grid_sampler_2d: out[n, c, h, w] samples input[n, c] at grid[n, h, w] = (x, y) in [-1, 1], as PyTorch
// computes it: unnormalized ((v + 1) / 2 * (size - 1) with align corners, else ((v + 1) * size - 1) / 2),
// then clipped to the border (padding mode 1) or reflected (2); bilinear (mode 0) weighs the four
// neighbours, out-of-range ones counting zero; nearest (1) takes the one nearest (ties to even).
//
// params: 0 numel, 1 C, 2 H, 3 W, 4 OH, 5 OW, 6 interpolation, 7 padding, 8 align corners

@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read> G: array<f32>;
@group(0) @binding(3) var<storage, read_write> Y: array<f32>;

#include "_element.wgsl"

fn reflect(v: f32, lo: f32, hi: f32) -> f32 {
  if (lo == hi) {
    return 0.0;
  }
  let span = (hi - lo) / 2.0;
  let x = abs(v - lo / 2.0);
  let extra = x - floor(x / span) * span;
  let flips = floor(x / span);
  if (u32(flips) % 2u == 0u) {
    return extra + lo / 2.0;
  }
  return span - extra + lo / 2.0;
}

fn coordinate(v: f32, size: u32) -> f32 {
  let n = f32(size);
  let align = pu(8u) != 0u;
  var c = select(((v + 1.0) * n - 1.0) / 2.0, (v + 1.0) / 2.0 * (n - 1.0), align);
  let padding = pu(7u);
  if (padding == 1u) {
    c = clamp(c, 0.0, n - 1.0);
  } else if (padding == 2u) {
    if (align) {
      c = reflect(c, 0.0, 2.0 * (n - 1.0));
    } else {
      c = reflect(c, -1.0, 2.0 * n - 1.0);
    }
    c = clamp(c, 0.0, n - 1.0);
  }
  return c;
}

fn at(base: u32, y: i32, x: i32) -> f32 {
  let H = i32(pu(2u));
  let W = i32(pu(3u));
  if (y < 0 || y >= H || x < 0 || x >= W) {
    return 0.0;
  }
  return X[base + u32(y * W + x)];
}

fn element(i: u32) {
  let C = pu(1u);
  let H = pu(2u);
  let W = pu(3u);
  let OH = pu(4u);
  let OW = pu(5u);
  let w = i % OW;
  let h = (i / OW) % OH;
  let c = (i / (OW * OH)) % C;
  let n = i / (OW * OH * C);
  let g = ((n * OH + h) * OW + w) * 2u;
  let ix = coordinate(G[g], W);
  let iy = coordinate(G[g + 1u], H);
  let base = (n * C + c) * H * W;
  if (pu(6u) == 1u) {
    Y[i] = at(base, i32(round(iy)), i32(round(ix)));
    return;
  }
  let x0 = floor(ix);
  let y0 = floor(iy);
  let x1 = x0 + 1.0;
  let y1 = y0 + 1.0;
  let xa = i32(x0);
  let ya = i32(y0);
  // PyTorch's weights and order: north-west, north-east, south-west, south-east.
  var v = at(base, ya, xa) * ((x1 - ix) * (y1 - iy));
  v += at(base, ya, xa + 1) * ((ix - x0) * (y1 - iy));
  v += at(base, ya + 1, xa) * ((x1 - ix) * (iy - y0));
  v += at(base, ya + 1, xa + 1) * ((ix - x0) * (iy - y0));
  Y[i] = v;
}
