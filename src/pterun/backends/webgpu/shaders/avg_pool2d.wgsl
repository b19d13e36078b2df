// 2-d average pooling. The divisor is the override when one is given, else
// the window clipped to the padded input (count_include_pad) or to the input.
//
// params: 0 numel, 1 H, 2 W, 3 OH, 4 OW, 5 KH, 6 KW, 7 stride h, 8 stride w,
//         9 pad h, 10 pad w, 11 count_include_pad, 12 divisor override (0: none)

@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;

#include "_element.wgsl"
#include "_window.wgsl"

fn element(i: u32) {
  let H = i32(pu(1u));
  let W = i32(pu(2u));
  let win = window(i);
  let ph = i32(pu(9u));
  let pw = i32(pu(10u));
  var h0 = win.oh * i32(pu(7u)) - ph;
  var w0 = win.ow * i32(pu(8u)) - pw;
  var h1 = min(h0 + i32(pu(5u)), H + ph);
  var w1 = min(w0 + i32(pu(6u)), W + pw);
  let padded = (h1 - h0) * (w1 - w0);
  h0 = max(h0, 0);
  w0 = max(w0, 0);
  h1 = min(h1, H);
  w1 = min(w1, W);
  var s = 0.0;
  for (var ih = h0; ih < h1; ih++) {
    for (var iw = w0; iw < w1; iw++) {
      s += X[win.base + u32(ih * W + iw)];
    }
  }
  var divisor = f32((h1 - h0) * (w1 - w0));
  if (pu(12u) != 0u) {
    divisor = f32(pi(12u));
  } else if (pu(11u) != 0u) {
    divisor = f32(padded);
  }
  Y[i] = s / divisor;
}
