// Where output element i of a 2-d pooling over [planes, H, W] is. Parameter words:
// 1 H, 2 W, 3 OH, 4 OW.

struct Window {
  oh: i32,
  ow: i32,
  base: u32,  // the plane's first input
}

fn window(i: u32) -> Window {
  let OH = pu(3u);
  let OW = pu(4u);
  return Window(i32((i / OW) % OH), i32(i % OW), (i / (OW * OH)) * (pu(1u) * pu(2u)));
}
