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

#include "_element.wgsl"
#include "_broadcast.wgsl"

fn element(i: u32) {
  let flags = pu(4u);
  var si = pu(2u) + i;
  var di = pu(3u) + i;
  if ((flags & 3u) != 3u) {
    let at = strided_offsets(i);
    if ((flags & 1u) == 0u) {
      si = pu(2u) + at.x;
    }
    if ((flags & 2u) == 0u) {
      di = pu(3u) + at.y;
    }
  }
  let x = S[si];
  D[di] = ${CONVERT};
}
