// The entry point of kernels with one invocation per output element: parameter word 0 is
// the element count, and the kernel's `element(i)` computes element i.

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = flat_id(gid, nwg, 64u);
  if (i < pu(0u)) {
    element(i);
  }
}
