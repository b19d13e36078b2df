// out[i] = f(x[i]) for one contiguous tensor, with up to two scalars (clamp
// bounds, an exponent, a comparison operand) taken from the parameter block.
// ${EXPR} is written in terms of `x`, `s0`, `s1`, all of type ${TC}.
//
// params: 0 numel, 1 s0 bits, 2 s1 bits

@group(0) @binding(1) var<storage, read> X: array<${TX}>;
@group(0) @binding(2) var<storage, read_write> Y: array<${TO}>;

#include "_element.wgsl"

fn element(i: u32) {
  let s0 = bitcast<${TC}>(pu(1u));
  let s1 = bitcast<${TC}>(pu(2u));
  let x = ${TC}(X[i]);
  Y[i] = ${TO}(${EXPR});
}
