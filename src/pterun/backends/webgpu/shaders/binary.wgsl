// out = f(a, b) with broadcasting. Each operand is addressed by its mode
// (0 strided walk, 1 same index as the output, 2 one element), so equal
// shapes and scalars skip the index arithmetic. ${EXPR} uses `a`, `b`
// and `alpha`, all of type ${TC}.
//
// params: 0 numel, 1 ndim, 2 modes (a | b << 4), 3 alpha bits,
//         8.. output sizes, 16.. a strides, 24.. b strides

@group(0) @binding(1) var<storage, read> A: array<${TA}>;
@group(0) @binding(2) var<storage, read> B: array<${TB}>;
@group(0) @binding(3) var<storage, read_write> Y: array<${TO}>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = flat_id(gid, nwg, 64u);
  if (i >= pu(0u)) {
    return;
  }
  let modes = pu(2u);
  let ma = modes & 15u;
  let mb = (modes >> 4u) & 15u;
  var ia = select(0u, i, ma == 1u);
  var ib = select(0u, i, mb == 1u);
  if (ma == 0u || mb == 0u) {
    var rem = i;
    var oa = 0u;
    var ob = 0u;
    for (var d = i32(pu(1u)) - 1; d >= 0; d--) {
      let k = u32(d);
      let size = pu(8u + k);
      let c = rem % size;
      rem = rem / size;
      oa += c * pu(16u + k);
      ob += c * pu(24u + k);
    }
    if (ma == 0u) {
      ia = oa;
    }
    if (mb == 0u) {
      ib = ob;
    }
  }
  let alpha = bitcast<${TC}>(pu(3u));
  let a = ${TC}(A[ia]);
  let b = ${TC}(B[ib]);
  Y[i] = ${TO}(${EXPR});
}
