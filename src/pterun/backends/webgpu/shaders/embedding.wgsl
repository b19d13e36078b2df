// out[r, c] = weight[index[r], c]. An index outside the table reads zeros.
//
// params: 0 numel, 1 row length, 2 rows in the table

@group(0) @binding(1) var<storage, read> W: array<${T}>;
@group(0) @binding(2) var<storage, read> I: array<i32>;
@group(0) @binding(3) var<storage, read_write> Y: array<${T}>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = flat_id(gid, nwg, 64u);
  if (i >= pu(0u)) {
    return;
  }
  let D = pu(1u);
  let r = I[i / D];
  if (r < 0 || u32(r) >= pu(2u)) {
    Y[i] = ${T}(0);
    return;
  }
  Y[i] = W[u32(r) * D + i % D];
}
