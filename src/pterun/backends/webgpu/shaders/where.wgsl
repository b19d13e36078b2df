// out = cond ? a : b with broadcasting of all three operands (as _broadcast.wgsl says).
//
// params: 0 numel, 1 ndim, 2 modes (c | a << 4 | b << 8),
//         8.. output sizes, 16.. cond strides, 24.. a strides, 32.. b strides

@group(0) @binding(1) var<storage, read> C: array<${TCOND}>;
@group(0) @binding(2) var<storage, read> A: array<${TA}>;
@group(0) @binding(3) var<storage, read> B: array<${TB}>;
@group(0) @binding(4) var<storage, read_write> Y: array<${TO}>;

#include "_element.wgsl"
#include "_broadcast.wgsl"

fn element(i: u32) {
  let at = operand_indices(i, 3u);
  if (C[at.x] != ${TCOND}(0)) {
    Y[i] = ${TO}(A[at.y]);
  } else {
    Y[i] = ${TO}(B[at.z]);
  }
}
