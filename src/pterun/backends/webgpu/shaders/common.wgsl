// Prepended to every kernel. Binding 0 is the dispatch's parameter block:
// shapes, strides and scalars as 32-bit words (floats bit-cast), rewritten
// when the graph is resized, so one compiled pipeline serves every shape.

struct Params {
  v: array<vec4<u32>, 16>,
}

@group(0) @binding(0) var<uniform> P: Params;

fn pu(i: u32) -> u32 {
  return P.v[i >> 2u][i & 3u];
}

fn pi(i: u32) -> i32 {
  return bitcast<i32>(pu(i));
}

fn pf(i: u32) -> f32 {
  return bitcast<f32>(pu(i));
}

// Grids wider than 65535 workgroups spill into y; this is the flat invocation index.
fn flat_id(gid: vec3<u32>, nwg: vec3<u32>, wg: u32) -> u32 {
  return gid.x + gid.y * nwg.x * wg;
}

// Float functions the elementwise formulas use. WGSL has no erf, its tanh may
// overflow to NaN for large inputs, and its pow is undefined for negative bases.

fn erf_f32(x: f32) -> f32 {
  // Abramowitz and Stegun 7.1.26: absolute error below 1.5e-7.
  let z = abs(x);
  let t = 1.0 / (1.0 + 0.3275911 * z);
  let poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))));
  let r = 1.0 - poly * exp(-z * z);
  return select(r, -r, x < 0.0);
}

fn tanh_f32(x: f32) -> f32 {
  let e = exp(-2.0 * abs(x));
  let r = (1.0 - e) / (1.0 + e);
  return select(r, -r, x < 0.0);
}

fn sigmoid_f32(x: f32) -> f32 {
  return 1.0 / (1.0 + exp(-x));
}

fn pow_f32(x: f32, y: f32) -> f32 {
  if (y == 0.0) {
    return 1.0;
  }
  if (y == 1.0) {
    return x;
  }
  if (y == 2.0) {
    return x * x;
  }
  let p = pow(abs(x), y);
  if (x >= 0.0) {
    return p;
  }
  if (floor(y) != y) {
    return bitcast<f32>(0x7fc00000u);
  }
  let odd = (floor(y * 0.5) * 2.0) != y;
  return select(p, -p, odd);
}

// sin and cos with their own range reduction: the WGSL built-ins only promise
// an absolute error of 2^-11, too coarse for rotary embeddings of long positions.
// The argument is reduced by pi/2 in three parts (Cody and Waite), then the
// Taylor series to the ninth and tenth power are exact to f32 on [-pi/4, pi/4].
fn reduce_half_pi(x: f32) -> vec2<f32> {
  let k = round(x * 0.636619772367581343);
  var r = fma(-k, 1.5703125, x);
  r = fma(-k, 4.837512969970703125e-4, r);
  r = fma(-k, 7.54978995489188216e-8, r);
  return vec2<f32>(r, k);
}

fn sin_poly(r: f32) -> f32 {
  let r2 = r * r;
  return r + r * r2 * (-0.16666666666666666 + r2 * (0.008333333333333333 + r2 * (-1.984126984126984e-4
    + r2 * 2.7557319223985893e-6)));
}

fn cos_poly(r: f32) -> f32 {
  let r2 = r * r;
  return 1.0 + r2 * (-0.5 + r2 * (0.041666666666666664 + r2 * (-0.001388888888888889 + r2 * (2.48015873015873e-5
    + r2 * -2.755731922398589e-7))));
}

// sin(x + quarter_turns * pi/2): cos is sin a quarter turn ahead.
fn sin_turned(x: f32, quarter_turns: i32) -> f32 {
  let red = reduce_half_pi(x);
  let q = (i32(red.y) + quarter_turns) & 3;
  let s = sin_poly(red.x);
  let c = cos_poly(red.x);
  switch q {
    case 0: { return s; }
    case 1: { return c; }
    case 2: { return -s; }
    default: { return -c; }
  }
}

fn sin_f32(x: f32) -> f32 {
  return sin_turned(x, 0);
}

fn cos_f32(x: f32) -> f32 {
  return sin_turned(x, 1);
}
