// torchao's choose_qparams_affine, ASYMMETRIC, for blocks of `length` consecutive elements: a scale and
// zero point per block (one invocation each, or a workgroup each for few long blocks: _rows.wgsl), in
// float as torchao computes them:
//   scale = (max(max, 0) - min(min, 0)) / (qmax - qmin), at least eps
//   zero point = clamp(qmin - round(min(min, 0) / scale), qmin, qmax)
//
// params: 0 blocks, 1 block length, 2 qmin, 3 qmax, 4 eps bits

@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read_write> SCALE: array<f32>;
@group(0) @binding(3) var<storage, read_write> ZP: array<${TZ}>;

#include "_rows.wgsl"

fn write_block(block: u32, lo: f32, hi: f32) {
  let qmin = f32(pi(2u));
  let qmax = f32(pi(3u));
  let neg = min(lo, 0.0);
  let pos = max(hi, 0.0);
  let s = max((pos - neg) / (qmax - qmin), pf(4u));
  SCALE[block] = s;
  ZP[block] = ${TZ}(i32(clamp(qmin - round(neg / s), qmin, qmax)));
}

fn serial_row(block: u32) {
  let L = pu(1u);
  let base = block * L;
  var lo = X[base];
  var hi = X[base];
  for (var j = 1u; j < L; j++) {
    lo = min(lo, X[base + j]);
    hi = max(hi, X[base + j]);
  }
  write_block(block, lo, hi);
}

fn shared_row(block: u32, lid: u32) {
  let L = pu(1u);
  let base = block * L;
  var lo = X[base];
  var hi = X[base];
  for (var j = lid; j < L; j += 64u) {
    lo = min(lo, X[base + j]);
    hi = max(hi, X[base + j]);
  }
  let hi_all = workgroup_max(lid, hi);
  let lo_all = -workgroup_max(lid, -lo);
  if (lid == 0u) {
    write_block(block, lo_all, hi_all);
  }
}
