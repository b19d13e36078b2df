// Rounds a half-precision tensor's values (held as f32) to the nearest half-precision number, ties to
// even, in place: what storing an operator's result in a float16 tensor does. Past the largest half
// (65504) a value becomes an infinity; below the smallest normal half it is rounded to a multiple of 2^-24.
//
// params: 0 numel

@group(0) @binding(1) var<storage, read_write> Y: array<f32>;

#include "_element.wgsl"

fn to_half(x: f32) -> f32 {
  let bits = bitcast<u32>(x);
  let magnitude = bits & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) {
    return x;  // infinities and NaNs
  }
  if (magnitude < 0x38800000u) {
    return round(x * 16777216.0) / 16777216.0;  // 2^24: the half subnormals' spacing
  }
  let rounded = (bits + 0x0fffu + ((bits >> 13u) & 1u)) & 0xffffe000u;
  if ((rounded & 0x7fffffffu) > 0x477fe000u) {
    return select(bitcast<f32>(0x7f800000u), bitcast<f32>(0xff800000u), x < 0.0);
  }
  return bitcast<f32>(rounded);
}

fn element(i: u32) {
  Y[i] = to_half(Y[i]);
}
