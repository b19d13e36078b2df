// out = cond ? a : b with broadcasting of all three operands (modes as in binary.wgsl).
//
// params: 0 numel, 1 ndim, 2 modes (c | a << 4 | b << 8),
//         8.. output sizes, 16.. cond strides, 24.. a strides, 32.. b strides

@group(0) @binding(1) var<storage, read> C: array<${TCOND}>;
@group(0) @binding(2) var<storage, read> A: array<${TA}>;
@group(0) @binding(3) var<storage, read> B: array<${TB}>;
@group(0) @binding(4) var<storage, read_write> Y: array<${TO}>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = flat_id(gid, nwg, 64u);
  if (i >= pu(0u)) {
    return;
  }
  let modes = pu(2u);
  let mc = modes & 15u;
  let ma = (modes >> 4u) & 15u;
  let mb = (modes >> 8u) & 15u;
  var ic = select(0u, i, mc == 1u);
  var ia = select(0u, i, ma == 1u);
  var ib = select(0u, i, mb == 1u);
  if (mc == 0u || ma == 0u || mb == 0u) {
    var rem = i;
    var oc = 0u;
    var oa = 0u;
    var ob = 0u;
    for (var d = i32(pu(1u)) - 1; d >= 0; d--) {
      let k = u32(d);
      let size = pu(8u + k);
      let c = rem % size;
      rem = rem / size;
      oc += c * pu(16u + k);
      oa += c * pu(24u + k);
      ob += c * pu(32u + k);
    }
    if (mc == 0u) {
      ic = oc;
    }
    if (ma == 0u) {
      ia = oa;
    }
    if (mb == 0u) {
      ib = ob;
    }
  }
  if (C[ic] != ${TCOND}(0)) {
    Y[i] = ${TO}(A[ia]);
  } else {
    Y[i] = ${TO}(B[ib]);
  }
}
