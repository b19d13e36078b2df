// Strided copy with element conversion: walks an index space of up to eight
// dimensions and moves src[src_off + sum(c * src_stride)] to
// dst[dst_off + sum(c * dst_stride)]. Permute, expand, slice, select, cat,
// repeat, split and dtype casts are all this kernel with different strides.
//
// params: 0 numel, 1 ndim, 2 src offset, 3 dst offset,
//         4 flags (1: src contiguous, 2: dst contiguous),
//         8.. sizes, 16.. src strides, 24.. dst strides

@group(0) @binding(1) var<storage, read> S: array<${TI}>;
@group(0) @binding(2) var<storage, read_write> D: array<${TO}>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let i = flat_id(gid, nwg, 64u);
  if (i >= pu(0u)) {
    return;
  }
  let flags = pu(4u);
  var si = pu(2u) + i;
  var di = pu(3u) + i;
  if ((flags & 3u) != 3u) {
    var rem = i;
    var so = 0u;
    var dof = 0u;
    for (var d = i32(pu(1u)) - 1; d >= 0; d--) {
      let k = u32(d);
      let size = pu(8u + k);
      let c = rem % size;
      rem = rem / size;
      so += c * pu(16u + k);
      dof += c * pu(24u + k);
    }
    if ((flags & 1u) == 0u) {
      si = pu(2u) + so;
    }
    if ((flags & 2u) == 0u) {
      di = pu(3u) + dof;
    }
  }
  let x = S[si];
  D[di] = ${CONVERT};
}
