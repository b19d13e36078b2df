// Direct 2-d convolution (grouped, strided, dilated, padded), one invocation
// per output element, with the bias and an output clamp folded in. When
// ${TRANSPOSED} it is the transposed convolution: the weight is
// [C_in, C_out / groups, KH, KW] and an input pixel contributes where the
// stride divides its offset.
//
// params: 0 numel, 1 C_in, 2 H, 3 W, 4 C_out, 5 OH, 6 OW, 7 KH, 8 KW,
//         9 stride h, 10 stride w, 11 pad h, 12 pad w, 13 dilation h, 14 dilation w,
//         15 groups, 16 has bias, 17 min bits, 18 max bits

const TRANSPOSED: bool = ${TRANSPOSED};

@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read> WT: array<f32>;
@group(0) @binding(3) var<storage, read> BIAS: array<f32>;
@group(0) @binding(4) var<storage, read_write> Y: array<f32>;

// The input row (or column) that tap k of output position o reads along a dimension of
// `size`, with that dimension's stride s, padding p and dilation d; -1 when it reads none.
fn tap(o: i32, k: u32, s: i32, p: i32, d: i32, size: i32) -> i32 {
  var at: i32;
  if (TRANSPOSED) {
    let t = o + p - i32(k) * d;
    if (t < 0 || t % s != 0) {
      return -1;
    }
    at = t / s;
  } else {
    at = o * s - p + i32(k) * d;
  }
  return select(at, -1, at < 0 || at >= size);
}

#include "_element.wgsl"

fn element(i: u32) {
  let C_in = pu(1u);
  let H = i32(pu(2u));
  let W = i32(pu(3u));
  let C_out = pu(4u);
  let OH = pu(5u);
  let OW = pu(6u);
  let KH = pu(7u);
  let KW = pu(8u);
  let sh = i32(pu(9u));
  let sw = i32(pu(10u));
  let ph = i32(pu(11u));
  let pw = i32(pu(12u));
  let dh = i32(pu(13u));
  let dw = i32(pu(14u));
  let groups = pu(15u);
  let ow = i32(i % OW);
  let oh = i32((i / OW) % OH);
  let oc = (i / (OW * OH)) % C_out;
  let n = i / (OW * OH * C_out);
  let cin_g = C_in / groups;
  let cout_g = C_out / groups;
  let g = oc / cout_g;
  var acc = 0.0;
  for (var ic = 0u; ic < cin_g; ic++) {
    let c = g * cin_g + ic;
    let x_plane = (n * C_in + c) * u32(H * W);
    for (var kh = 0u; kh < KH; kh++) {
      let ih = tap(oh, kh, sh, ph, dh, H);
      if (ih < 0) {
        continue;
      }
      for (var kw = 0u; kw < KW; kw++) {
        let iw = tap(ow, kw, sw, pw, dw, W);
        if (iw < 0) {
          continue;
        }
        var w_at: u32;
        if (TRANSPOSED) {
          w_at = ((c * cout_g + (oc - g * cout_g)) * KH + kh) * KW + kw;
        } else {
          w_at = ((oc * cin_g + ic) * KH + kh) * KW + kw;
        }
        acc += X[x_plane + u32(ih * W + iw)] * WT[w_at];
      }
    }
  }
  if (pu(16u) != 0u) {
    acc += BIAS[oc];
  }
  Y[i] = min(max(acc, pf(17u)), pf(18u));
}
