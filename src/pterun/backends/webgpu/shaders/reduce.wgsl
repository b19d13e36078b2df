// Sum, mean, max or min over a set of dimensions. An output element's inputs
// are walked through their own sizes and strides, by one invocation or by a
// workgroup (_rows.wgsl: an output is a row).
//
// params: 0 outputs, 1 reduced count, 2 kept rank, 3 reduced rank,
//         8.. kept sizes, 16.. kept strides, 24.. reduced sizes, 32.. reduced strides

const OP: u32 = ${OP}u;  // 0 sum, 1 mean, 2 max, 3 min

@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;

#include "_rows.wgsl"

fn combine(a: f32, b: f32) -> f32 {
  if (OP == 2u) {
    return select(max(a, b), a + b, a != a || b != b);
  }
  if (OP == 3u) {
    return select(min(a, b), a + b, a != a || b != b);
  }
  return a + b;
}

fn start() -> f32 {
  if (OP == 2u) {
    return bitcast<f32>(0xff800000u);
  }
  if (OP == 3u) {
    return bitcast<f32>(0x7f800000u);
  }
  return 0.0;
}

fn output_base(o: u32) -> u32 {
  var rem = o;
  var base = 0u;
  for (var d = i32(pu(2u)) - 1; d >= 0; d--) {
    let k = u32(d);
    let c = rem % pu(8u + k);
    rem = rem / pu(8u + k);
    base += c * pu(16u + k);
  }
  return base;
}

fn value_at(base: u32, r: u32) -> f32 {
  var rr = r;
  var at = base;
  for (var d = i32(pu(3u)) - 1; d >= 0; d--) {
    let k = u32(d);
    let c = rr % pu(24u + k);
    rr = rr / pu(24u + k);
    at += c * pu(32u + k);
  }
  return X[at];
}

fn finish(o: u32, v: f32) {
  if (OP == 1u) {
    Y[o] = v / f32(pu(1u));
  } else {
    Y[o] = v;
  }
}

fn serial_row(o: u32) {
  let base = output_base(o);
  var acc = start();
  for (var r = 0u; r < pu(1u); r++) {
    acc = combine(acc, value_at(base, r));
  }
  finish(o, acc);
}

// Not workgroup_sum: max and min propagate NaN (combine).
fn shared_row(o: u32, lid: u32) {
  let base = output_base(o);
  var acc = start();
  for (var r = lid; r < pu(1u); r += 64u) {
    acc = combine(acc, value_at(base, r));
  }
  part[lid] = acc;
  workgroupBarrier();
  for (var w = 32u; w > 0u; w >>= 1u) {
    if (lid < w) {
      part[lid] = combine(part[lid], part[lid + w]);
    }
    workgroupBarrier();
  }
  if (lid == 0u) {
    finish(o, part[0]);
  }
}
