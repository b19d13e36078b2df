// et_vk.fused_ce: cross-entropy of logits [M, V] against labels [M] (a negative label is ignored) and its
// gradient. Stage 0, one invocation per row: lse = max + log(sum(exp(x - max))), the row's loss
// (lse - x[label]) / n_valid, and dlogits = (softmax - onehot) / n_valid (zero for ignored rows).
// Stage 1, one invocation: the loss, the rows' losses summed in order.
//
// params: 0 rows (stage 0) or 1 (stage 1), 1 V, 2 n_valid bits, 3 M

const STAGE: u32 = ${STAGE};

@group(0) @binding(1) var<storage, read> X: array<f32>;
@group(0) @binding(2) var<storage, read> LABEL: array<i32>;
@group(0) @binding(3) var<storage, read_write> DX: array<f32>;
@group(0) @binding(4) var<storage, read_write> ROWLOSS: array<f32>;
@group(0) @binding(5) var<storage, read_write> LOSS: array<f32>;

#include "_element.wgsl"

fn element(m: u32) {
  if (STAGE == 1u) {
    var total = 0.0;
    for (var r = 0u; r < pu(3u); r++) {
      total += ROWLOSS[r];
    }
    LOSS[0] = total;
    return;
  }
  let V = pu(1u);
  let n = pf(2u);
  let base = m * V;
  let label = LABEL[m];
  var mx = bitcast<f32>(0xff800000u);
  for (var j = 0u; j < V; j++) {
    mx = max(mx, X[base + j]);
  }
  var sum = 0.0;
  for (var j = 0u; j < V; j++) {
    sum += exp(X[base + j] - mx);
  }
  let valid = label >= 0;
  let picked = u32(max(label, 0));
  ROWLOSS[m] = select(0.0, (mx + log(sum) - X[base + picked]) / n, valid);
  for (var j = 0u; j < V; j++) {
    let onehot = select(0.0, 1.0, j == picked);
    DX[base + j] = select(0.0, (exp(X[base + j] - mx) / sum - onehot) / n, valid);
  }
}
