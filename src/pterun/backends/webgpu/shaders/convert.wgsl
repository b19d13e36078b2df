// Widens or narrows an input the caller passed in a type WGSL cannot hold
// (64-bit or 8-bit integers, bools) into the tensor's 32-bit words. The
// staging buffer holds the caller's raw bytes.
//
// params: 0 numel, 1 mode (0: int64 -> low word, 1: unsigned byte, 2: signed byte)

@group(0) @binding(1) var<storage, read> S: array<u32>;
@group(0) @binding(2) var<storage, read_write> Y: array<${T_OUT}>;

#include "_element.wgsl"

fn element(i: u32) {
  let mode = pu(1u);
  var v: u32;
  if (mode == 0u) {
    v = S[2u * i];
  } else {
    let byte = (S[i >> 2u] >> (8u * (i & 3u))) & 255u;
    v = byte;
    if (mode == 2u && byte >= 128u) {
      v = byte | 0xffffff00u;
    }
  }
  Y[i] = bitcast<${T_OUT}>(v);
}
