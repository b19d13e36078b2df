// Softmax (or log-softmax when ${LOG}) along one dimension of any position:
// a row is `length` elements `inner` apart, handled by one invocation or one
// workgroup (_rows.wgsl).
//
// params: 0 rows, 1 length, 2 inner

const LOG: bool = ${LOG};

@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;

#include "_rows.wgsl"

fn row_base(row: u32) -> u32 {
  let D = pu(1u);
  let inner = pu(2u);
  return (row / inner) * D * inner + row % inner;
}

fn write_row(base: u32, first: u32, step: u32, mx: f32, total: f32) {
  let D = pu(1u);
  let inner = pu(2u);
  for (var j = first; j < D; j += step) {
    let at = base + j * inner;
    if (LOG) {
      Y[at] = X[at] - mx - log(total);
    } else {
      Y[at] = exp(X[at] - mx) / total;
    }
  }
}

fn serial_row(row: u32) {
  let D = pu(1u);
  let inner = pu(2u);
  let base = row_base(row);
  var m = bitcast<f32>(0xff800000u);
  for (var j = 0u; j < D; j++) {
    m = max(m, X[base + j * inner]);
  }
  var s = 0.0;
  for (var j = 0u; j < D; j++) {
    s += exp(X[base + j * inner] - m);
  }
  write_row(base, 0u, 1u, m, s);
}

fn shared_row(row: u32, lid: u32) {
  let D = pu(1u);
  let inner = pu(2u);
  let base = row_base(row);
  var m = bitcast<f32>(0xff800000u);
  for (var j = lid; j < D; j += 64u) {
    m = max(m, X[base + j * inner]);
  }
  let mx = workgroup_max(lid, m);
  var s = 0.0;
  for (var j = lid; j < D; j += 64u) {
    s += exp(X[base + j * inner] - mx);
  }
  write_row(base, lid, 64u, mx, workgroup_sum(lid, s));
}
