// out = f(a, b) with broadcasting (operands addressed as _broadcast.wgsl
// says). ${EXPR} uses `a`, `b` and `alpha`, all of type ${TC}.
//
// params: 0 numel, 1 ndim, 2 modes (a | b << 4), 3 alpha bits,
//         8.. output sizes, 16.. a strides, 24.. b strides

@group(0) @binding(1) var<storage, read> A: array<${TA}>;
@group(0) @binding(2) var<storage, read> B: array<${TB}>;
@group(0) @binding(3) var<storage, read_write> Y: array<${TO}>;

#include "_element.wgsl"
#include "_broadcast.wgsl"

fn element(i: u32) {
  let at = operand_indices(i, 2u);
  let alpha = bitcast<${TC}>(pu(3u));
  let a = ${TC}(A[at.x]);
  let b = ${TC}(B[at.y]);
  Y[i] = ${TO}(${EXPR});
}
