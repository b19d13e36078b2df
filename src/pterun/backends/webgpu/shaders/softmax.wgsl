// Softmax (or log-softmax when ${LOG}) along one dimension of any position:
// a row is `length` elements `inner` apart. ${SERIAL}: one invocation per
// row, else one workgroup per row reducing the max and the sum of
// exponentials through workgroup memory (see rms_norm.wgsl).
//
// params: 0 rows, 1 length, 2 inner

const LOG: bool = ${LOG};
const SERIAL: bool = ${SERIAL};

@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;

var<workgroup> part: array<f32, 64>;

fn row_base(row: u32) -> u32 {
  let D = pu(1u);
  let inner = pu(2u);
  return (row / inner) * D * inner + row % inner;
}

fn write_row(base: u32, first: u32, step: u32, mx: f32, total: f32) {
  let D = pu(1u);
  let inner = pu(2u);
  for (var j = first; j < D; j += step) {
    let at = base + j * inner;
    if (LOG) {
      Y[at] = X[at] - mx - log(total);
    } else {
      Y[at] = exp(X[at] - mx) / total;
    }
  }
}

fn serial(row: u32) {
  if (row < pu(0u)) {
    let D = pu(1u);
    let inner = pu(2u);
    let base = row_base(row);
    var m = bitcast<f32>(0xff800000u);
    for (var j = 0u; j < D; j++) {
      m = max(m, X[base + j * inner]);
    }
    var s = 0.0;
    for (var j = 0u; j < D; j++) {
      s += exp(X[base + j * inner] - m);
    }
    write_row(base, 0u, 1u, m, s);
  }
}

fn shared_row(row: u32, lid: u32) {
  let D = pu(1u);
  let inner = pu(2u);
  let base = row_base(row);
  var m = bitcast<f32>(0xff800000u);
  for (var j = lid; j < D; j += 64u) {
    m = max(m, X[base + j * inner]);
  }
  part[lid] = m;
  workgroupBarrier();
  for (var w = 32u; w > 0u; w >>= 1u) {
    if (lid < w) {
      part[lid] = max(part[lid], part[lid + w]);
    }
    workgroupBarrier();
  }
  let mx = part[0];
  workgroupBarrier();
  var s = 0.0;
  for (var j = lid; j < D; j += 64u) {
    s += exp(X[base + j * inner] - mx);
  }
  part[lid] = s;
  workgroupBarrier();
  for (var w = 32u; w > 0u; w >>= 1u) {
    if (lid < w) {
      part[lid] += part[lid + w];
    }
    workgroupBarrier();
  }
  write_row(base, lid, 64u, mx, part[0]);
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
