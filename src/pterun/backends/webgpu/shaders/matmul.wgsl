// C[z] = alpha * A[z] x B[z] + beta * bias. Each invocation accumulates a 4 x 4
// block of C in registers, walking K in order (so every output is the same
// left-to-right sum a CPU kernel computes). A is [M, K] row-major; B is
// [K, N], or [N, K] when ${B_TRANSPOSED} (a linear layer's weight). Rows and
// columns past the edge read a clamped index and are not written. Batches
// advance by their own strides (0 repeats an operand across the batch).
//
// params: 0 M, 1 N, 2 K, 3 A batch stride, 4 B batch stride, 5 C batch stride,
//         6 alpha bits, 7 beta bits, 8 bias (0 none, 1 per column, 2 [M, N]),
//         9 bias batch stride

const B_TRANSPOSED: bool = ${B_TRANSPOSED};

@group(0) @binding(1) var<storage, read> A: array<f32>;
@group(0) @binding(2) var<storage, read> B: array<f32>;
@group(0) @binding(3) var<storage, read> BIAS: array<f32>;
@group(0) @binding(4) var<storage, read_write> C: array<f32>;

@compute @workgroup_size(8, 8)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let M = pu(0u);
  let N = pu(1u);
  let K = pu(2u);
  let n0 = gid.x * 4u;
  let m0 = gid.y * 4u;
  if (n0 >= N || m0 >= M) {
    return;
  }
  let z = gid.z;
  let a0 = z * pu(3u);
  let b0 = z * pu(4u);
  let r = vec4<u32>(m0, min(m0 + 1u, M - 1u), min(m0 + 2u, M - 1u), min(m0 + 3u, M - 1u)) * K + a0;
  let c = vec4<u32>(n0, min(n0 + 1u, N - 1u), min(n0 + 2u, N - 1u), min(n0 + 3u, N - 1u));
  var acc0 = vec4<f32>(0.0);
  var acc1 = vec4<f32>(0.0);
  var acc2 = vec4<f32>(0.0);
  var acc3 = vec4<f32>(0.0);
  for (var k = 0u; k < K; k++) {
    var b: vec4<f32>;
    if (B_TRANSPOSED) {
      let bt = c * K + b0 + k;
      b = vec4<f32>(B[bt.x], B[bt.y], B[bt.z], B[bt.w]);
    } else {
      let bn = c + (b0 + k * N);
      b = vec4<f32>(B[bn.x], B[bn.y], B[bn.z], B[bn.w]);
    }
    let ak = r + k;
    acc0 += A[ak.x] * b;
    acc1 += A[ak.y] * b;
    acc2 += A[ak.z] * b;
    acc3 += A[ak.w] * b;
  }
  let alpha = pf(6u);
  let beta = pf(7u);
  let mode = pu(8u);
  let cz = z * pu(5u);
  var rows = array<vec4<f32>, 4>(acc0, acc1, acc2, acc3);
  for (var i = 0u; i < 4u; i++) {
    let m = m0 + i;
    if (m >= M) {
      break;
    }
    for (var j = 0u; j < 4u; j++) {
      let n = n0 + j;
      if (n >= N) {
        break;
      }
      var v = rows[i][j] * alpha;
      if (mode == 1u) {
        v += beta * BIAS[n];
      } else if (mode == 2u) {
        v += beta * BIAS[z * pu(9u) + m * N + n];
      }
      C[cz + m * N + n] = v;
    }
  }
}
