// Quantized elementwise operators: each operand is dequantized ((q - zero point) * scale, int8 held in
// 32-bit words) or taken as it is (a float operand), the two are combined by ${EXPR} (in `a`, `b` and
// `alpha`, as f32), and the result is quantized as ExecuTorch quantizes (round half to even of
// x / scale, plus the zero point, clamped to [qmin, qmax]) or written as a float.
// Operands are addressed as in _broadcast.wgsl (strided, the output's index, or one element).
//
// params: 0 numel, 1 rank, 2 operand modes, 3 qmin, 4 qmax, 8.. sizes, 16.. A strides, 24.. B strides,
//         40 A scale, 41 A zero point, 42 B scale, 43 B zero point, 44 alpha, 45 1 / output scale,
//         46 output zero point

const DEQUANTIZE_A: bool = ${DEQUANTIZE_A};
const DEQUANTIZE_B: bool = ${DEQUANTIZE_B};
const QUANTIZE: bool = ${QUANTIZE};

@group(0) @binding(1) var<storage, read> A: array<${TA}>;
@group(0) @binding(2) var<storage, read> B: array<${TB}>;
@group(0) @binding(3) var<storage, read_write> Y: array<${TO}>;

#include "_element.wgsl"
#include "_broadcast.wgsl"

fn quantize(v: f32) -> ${TO} {
  let q = clamp(round(v * pf(45u)) + f32(pi(46u)), f32(pi(3u)), f32(pi(4u)));
  return ${TO}(i32(q));
}

fn element(i: u32) {
  let at = operand_indices(i, 2u);
  var a = f32(A[at.x]);
  if (DEQUANTIZE_A) {
    a = f32(i32(A[at.x]) - pi(41u)) * pf(40u);
  }
  var b = f32(B[at.y]);
  if (DEQUANTIZE_B) {
    b = f32(i32(B[at.y]) - pi(43u)) * pf(42u);
  }
  let alpha = pf(44u);
  let r = ${EXPR};
  if (QUANTIZE) {
    Y[i] = quantize(r);
  } else {
    Y[i] = ${TO}(r);
  }
}
