// Quantized 2-d convolution (et_vk.q8ta_conv2d, _pw, _dw, _transposed): int8 input [N, C, H, W] with a
// per-tensor zero point, int8 weights (the file's bytes), exact integer sums of (x - zero point) * w,
// then float: sum * input scale * weight scale[oc] (+ bias[oc]), relu when asked, quantized to int8.
// One invocation per output element. Positions outside the input contribute nothing (a zero point's
// worth: padding is zero in float).
//
// Weights, as the Vulkan partitioner lays them out: [OC, KH * KW * IC/groups] rows (plain, pointwise and
// transposed; a row's k is (kh * KW + kw) * IC/groups + ic), or [KH, KW, OC] for depthwise (${DEPTHWISE}).
// ${TRANSPOSED}: input row ih feeds output row oh where oh = ih * stride - pad + kh * dilation.
//
// params: 0 numel, 1 C, 2 H, 3 W, 4 OC, 5 OH, 6 OW, 7 KH, 8 KW, 9..10 stride, 11..12 padding,
//         13..14 dilation, 15 groups, 16 weight row stride (bytes), 17 input zero point, 18 input scale,
//         19 1 / output scale, 20 output zero point, 21 has bias, 22 relu

const DEPTHWISE: bool = ${DEPTHWISE};
const TRANSPOSED: bool = ${TRANSPOSED};

@group(0) @binding(1) var<storage, read> X: array<i32>;
@group(0) @binding(2) var<storage, read> W: array<u32>;
@group(0) @binding(3) var<storage, read> S: array<f32>;
@group(0) @binding(4) var<storage, read> BIAS: array<f32>;
@group(0) @binding(5) var<storage, read_write> Y: array<i32>;

#include "_element.wgsl"

fn weight(i: u32) -> i32 {
  return i32(((W[i >> 2u] >> ((i & 3u) * 8u)) & 255u) ^ 128u) - 128;
}

// The input position output position o reads at kernel tap t along one axis (-1: none).
fn source(o: u32, t: u32, size: u32, stride: u32, pad: u32, dilation: u32) -> i32 {
  if (TRANSPOSED) {
    let num = i32(o) + i32(pad) - i32(t * dilation);
    if (num < 0 || num % i32(stride) != 0) {
      return -1;
    }
    let at = num / i32(stride);
    return select(at, -1, at >= i32(size));
  }
  let at = i32(o * stride + t * dilation) - i32(pad);
  return select(at, -1, at < 0 || at >= i32(size));
}

fn element(i: u32) {
  let C = pu(1u);
  let H = pu(2u);
  let Wd = pu(3u);
  let OC = pu(4u);
  let OH = pu(5u);
  let OW = pu(6u);
  let KH = pu(7u);
  let KW = pu(8u);
  let ow = i % OW;
  let oh = (i / OW) % OH;
  let oc = (i / (OW * OH)) % OC;
  let n = i / (OW * OH * OC);
  let groups = pu(15u);
  let icg = C / groups;
  let ic0 = (oc / (OC / groups)) * icg;
  let row = pu(16u);
  let zp = pi(17u);
  var acc = 0;
  for (var kh = 0u; kh < KH; kh++) {
    let ih = source(oh, kh, H, pu(9u), pu(11u), pu(13u));
    if (ih < 0) {
      continue;
    }
    for (var kw = 0u; kw < KW; kw++) {
      let iw = source(ow, kw, Wd, pu(10u), pu(12u), pu(14u));
      if (iw < 0) {
        continue;
      }
      let tap = kh * KW + kw;
      for (var c = 0u; c < icg; c++) {
        let x = X[((n * C + ic0 + c) * H + u32(ih)) * Wd + u32(iw)] - zp;
        var w: i32;
        if (DEPTHWISE) {
          w = weight(tap * row + oc);
        } else {
          w = weight(oc * row + tap * icg + c);
        }
        acc += x * w;
      }
    }
  }
  var v = f32(acc) * pf(18u) * S[oc];
  if (pu(21u) != 0u) {
    v += BIAS[oc];
  }
  if (pu(22u) != 0u) {
    v = max(v, 0.0);
  }
  Y[i] = i32(clamp(round(v * pf(19u)) + f32(pi(20u)), -128.0, 127.0));
}
