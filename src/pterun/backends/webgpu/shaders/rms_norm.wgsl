// y = x / sqrt(mean(x^2) + eps) * weight over the last dimension. With
// ${SERIAL} each invocation normalizes a row on its own (many or short rows);
// otherwise a workgroup shares a row and reduces through workgroup memory
// (few long rows). The host picks the variant per shape.
//
// params: 0 rows, 1 row length, 2 eps bits

const SERIAL: bool = ${SERIAL};

@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read> W: array<f32>;
@group(0) @binding(3) var<storage, read_write> Y: array<f32>;

var<workgroup> part: array<f32, 64>;

fn write_row(base: u32, D: u32, first: u32, step: u32, sum_sq: f32) {
  let r = 1.0 / sqrt(sum_sq / f32(D) + pf(2u));
  for (var j = first; j < D; j += step) {
    Y[base + j] = X[base + j] * r * W[j];
  }
}

fn serial(row: u32) {
  if (row < pu(0u)) {
    let D = pu(1u);
    let base = row * D;
    var s = 0.0;
    for (var j = 0u; j < D; j++) {
      let v = X[base + j];
      s += v * v;
    }
    write_row(base, D, 0u, 1u, s);
  }
}

fn shared_row(row: u32, lid: u32) {
  let D = pu(1u);
  let base = row * D;
  var s = 0.0;
  for (var j = lid; j < D; j += 64u) {
    let v = X[base + j];
    s += v * v;
  }
  part[lid] = s;
  workgroupBarrier();
  for (var w = 32u; w > 0u; w >>= 1u) {
    if (lid < w) {
      part[lid] += part[lid + w];
    }
    workgroupBarrier();
  }
  write_row(base, D, lid, 64u, part[0]);
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
        @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  if (SERIAL) {
    serial(flat_id(gid, nwg, 64u));
  } else {
    let row = wid.x + wid.y * nwg.x;
    if (row < pu(0u)) {
      shared_row(row, lid.x);
    }
  }
}
