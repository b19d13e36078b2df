// out[i] = start + i * step: a constant fill (step 0) or an arange.
//
// params: 0 numel, 1 start bits, 2 step bits

@group(0) @binding(1) var<storage, read_write> Y: array<${TO}>;

#include "_element.wgsl"

fn element(i: u32) {
  let start = bitcast<${TO}>(pu(1u));
  let step = bitcast<${TO}>(pu(2u));
  Y[i] = start + ${TO}(i) * step;
}
