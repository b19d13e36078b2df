// 2-d max pooling with the flat in-plane index of each maximum (as
// max_pool2d_with_indices returns it). Padding never wins; NaN does.
//
// params: 0 numel, 1 H, 2 W, 3 OH, 4 OW, 5 KH, 6 KW, 7 stride h, 8 stride w,
//         9 pad h, 10 pad w, 11 dilation h, 12 dilation w

@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
@group(0) @binding(3) var<storage, read_write> IDX: array<i32>;

#include "_element.wgsl"
#include "_window.wgsl"

fn element(i: u32) {
  let H = i32(pu(1u));
  let W = i32(pu(2u));
  let win = window(i);
  var best = bitcast<f32>(0xff800000u);
  var at = -1;
  for (var kh = 0; kh < i32(pu(5u)); kh++) {
    let ih = win.oh * i32(pu(7u)) - i32(pu(9u)) + kh * i32(pu(11u));
    if (ih < 0 || ih >= H) {
      continue;
    }
    for (var kw = 0; kw < i32(pu(6u)); kw++) {
      let iw = win.ow * i32(pu(8u)) - i32(pu(10u)) + kw * i32(pu(12u));
      if (iw < 0 || iw >= W) {
        continue;
      }
      let v = X[win.base + u32(ih * W + iw)];
      if (at < 0 || v > best || (v != v && best == best)) {
        best = v;
        at = ih * W + iw;
      }
    }
  }
  Y[i] = best;
  IDX[i] = at;
}
