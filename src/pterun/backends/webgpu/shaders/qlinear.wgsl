// Linear layers with quantized weights, y[m, n] = sum_k x[m, k] * w[n, k] (+ bias[n]), one invocation
// per output element, k in order.
//
// Weights are the file's bytes, four to a word: int8 rows (${W_MODE} 0), or two 4-bit values a byte,
// stored +8, the even k in the high nibble (1: linear_qcs4w) or the low one (2: q4gsw). Scales are per
// output channel, or per group of k: scale[(k / group) * scale row stride + n].
// ${X_MODE} 0: float inputs, dequantized weights, float sums. 1: int8 inputs with a per-tensor zero
// point and int8 weights: exact integer sums of (x - zero point) * w, scaled once. 2: float inputs
// quantized per row first (scales and zero points of a choose_qparams_affine), as torchao does.
// ${QUANTIZE}: the result quantized to int8 (an output scale and zero point).
// Serially (_rows.wgsl), one invocation sums an output's k in order; shared, a workgroup splits its k
// (every 64th each) and adds the partial sums in a fixed tree: the host takes that one for a single row
// of float inputs (decode), where one invocation per output would leave most of the device idle.
//
// params: 0 M * N, 1 N, 2 K, 3 weight row stride (bytes), 4 group size (0: per channel), 5 scale row
//         stride, 6 has bias, 7 relu, 8 input zero point, 9 input scale, 10 1 / output scale,
//         11 output zero point, 12 qmin, 13 qmax (of X_MODE 2)

const X_MODE: u32 = ${X_MODE};
const W_MODE: u32 = ${W_MODE};
const QUANTIZE: bool = ${QUANTIZE};

@group(0) @binding(1) var<storage, read> X: array<${TX}>;
@group(0) @binding(2) var<storage, read> XS: array<f32>;
@group(0) @binding(3) var<storage, read> XZ: array<i32>;
@group(0) @binding(4) var<storage, read> W: array<u32>;
@group(0) @binding(5) var<storage, read> S: array<f32>;
@group(0) @binding(6) var<storage, read> BIAS: array<f32>;
@group(0) @binding(7) var<storage, read_write> Y: array<${TO}>;

#include "_rows.wgsl"

fn byte_at(i: u32) -> u32 {
  return (W[i >> 2u] >> ((i & 3u) * 8u)) & 255u;
}

fn weight(n: u32, k: u32) -> i32 {
  let row = n * pu(3u);
  if (W_MODE == 0u) {
    return i32(byte_at(row + k) ^ 128u) - 128;
  }
  let b = byte_at(row + (k >> 1u));
  let even = (k & 1u) == 0u;
  let high = select(!even, even, W_MODE == 1u);
  return i32(select(b & 15u, b >> 4u, high)) - 8;
}

fn scale(n: u32, k: u32) -> f32 {
  let group = pu(4u);
  if (group == 0u) {
    return S[n];
  }
  return S[(k / group) * pu(5u) + n];
}

fn float_sum(i: u32, first: u32, step: u32) -> f32 {
  let N = pu(1u);
  let K = pu(2u);
  let m = i / N;
  let n = i % N;
  let xrow = m * K;
  var xs = 1.0;
  var inv = 1.0;
  var xz = 0;
  if (X_MODE == 2u) {
    xs = XS[m];
    inv = 1.0 / xs;
    xz = XZ[m];
  }
  var acc = 0.0;
  for (var k = first; k < K; k += step) {
    var x = f32(X[xrow + k]);
    if (X_MODE == 2u) {
      let q = clamp(round(x * inv) + f32(xz), f32(pi(12u)), f32(pi(13u)));
      x = (q - f32(xz)) * xs;
    }
    acc += x * (f32(weight(n, k)) * scale(n, k));
  }
  return acc;
}

fn finish(i: u32, sum: f32) {
  let n = i % pu(1u);
  var v = sum;
  if (pu(6u) != 0u) {
    v += BIAS[n];
  }
  if (pu(7u) != 0u) {
    v = max(v, 0.0);
  }
  if (QUANTIZE) {
    Y[i] = ${TO}(i32(clamp(round(v * pf(10u)) + f32(pi(11u)), -128.0, 127.0)));
  } else {
    Y[i] = ${TO}(v);
  }
}

fn serial_row(i: u32) {
  if (X_MODE != 1u) {
    finish(i, float_sum(i, 0u, 1u));
    return;
  }
  let N = pu(1u);
  let K = pu(2u);
  let n = i % N;
  let xrow = (i / N) * K;
  let zp = pi(8u);
  var acc = 0;
  for (var k = 0u; k < K; k++) {
    acc += (i32(X[xrow + k]) - zp) * weight(n, k);
  }
  finish(i, f32(acc) * pf(9u) * S[n]);
}

fn shared_row(i: u32, lid: u32) {
  let total = workgroup_sum(lid, float_sum(i, lid, 64u));
  if (lid == 0u) {
    finish(i, total);
  }
}
