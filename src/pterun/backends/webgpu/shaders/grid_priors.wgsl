// et_vk.grid_priors: the centres of a [H, W] grid of cells `stride` apart, [(x + offset) * stride,
// (y + offset) * stride] for each cell in row-major order.
//
// params: 0 H * W, 1 W, 2 stride, 3 offset bits

@group(0) @binding(1) var<storage, read_write> Y: array<f32>;

#include "_element.wgsl"

fn element(i: u32) {
  let W = pu(1u);
  let stride = f32(pu(2u));
  let offset = pf(3u);
  Y[2u * i] = (f32(i % W) + offset) * stride;
  Y[2u * i + 1u] = (f32(i / W) + offset) * stride;
}
