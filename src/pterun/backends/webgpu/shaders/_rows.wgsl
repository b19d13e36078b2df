// The entry point of row kernels. With ${SERIAL} each invocation handles a row on its own
// (many or short rows); otherwise a workgroup shares a row and combines through workgroup
// memory (few long rows). The host picks the variant per shape (ops/common.py). Parameter
// word 0 is the row count; the kernel defines serial_row(row) and shared_row(row, lid).

const SERIAL: bool = ${SERIAL};

var<workgroup> part: array<f32, 64>;

// The sum of v over the workgroup's 64 invocations, in a fixed tree order, given to all of them.
fn workgroup_sum(lid: u32, v: f32) -> f32 {
  part[lid] = v;
  workgroupBarrier();
  for (var w = 32u; w > 0u; w >>= 1u) {
    if (lid < w) {
      part[lid] += part[lid + w];
    }
    workgroupBarrier();
  }
  let total = part[0];
  workgroupBarrier();
  return total;
}

// The largest v over the workgroup's 64 invocations, given to all of them.
fn workgroup_max(lid: u32, v: f32) -> f32 {
  part[lid] = v;
  workgroupBarrier();
  for (var w = 32u; w > 0u; w >>= 1u) {
    if (lid < w) {
      part[lid] = max(part[lid], part[lid + w]);
    }
    workgroupBarrier();
  }
  let total = part[0];
  workgroupBarrier();
  return total;
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(local_invocation_id) lid: vec3<u32>,
        @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  if (SERIAL) {
    let row = flat_id(gid, nwg, 64u);
    if (row < pu(0u)) {
      serial_row(row);
    }
  } else {
    // The row comes from the workgroup id alone, so every barrier of shared_row is reached by
    // the whole workgroup.
    let row = wid.x + wid.y * nwg.x;
    if (row < pu(0u)) {
      shared_row(row, lid.x);
    }
  }
}
