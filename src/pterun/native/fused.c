/* Float32 chains the executor runs as one call (kernels/fused.py), in the rounding of the PyTorch CPU kernels
 * that run them step by step: RMSNorm (x * x, its mean, + eps, rsqrt, the two products) and the rotary embedding
 * of interleaved pairs. A decode step of a small LLM calls each a few dozen times on rows of a few hundred
 * values, where PyTorch's six or seven calls a chain cost more than the arithmetic.
 *
 * Every step is one IEEE operation rounded to float (products, sums, a division, a square root: the library's
 * sqrtf is correctly rounded, and -ffp-contract=off keeps products and sums apart), except the mean's sum,
 * whose order is PyTorch's: its cascade sum over a contiguous row (aten/src/ATen/native/cpu/SumKernel.cpp), in
 * `lanes`-wide vectors (16 where ATen runs its AVX-512 kernels, 8 for AVX2 and its other builds), four vectors
 * interleaved, partial sums folded at every 16 steps of four. kernels/fused.py checks these against PyTorch's
 * own kernels in the process before it takes them.
 */
#include <math.h>
#include <string.h>

#include "native.h"

#define MAX_LANES 16
#define ILP 4    /* vectors summed side by side (row_sum's ilp_factor) */
#define LEVELS 4 /* multi_row_sum's num_levels */

static int64_t ceil_log2(int64_t x) {
  if (x <= 2) return 1;
  int64_t bits = 0;
  for (uint64_t v = (uint64_t)(x - 1); v; v >>= 1) bits++;
  return bits;
}

/* PyTorch's float32 sum of the squares of x[0..n) (n >= lanes): row_sum over n / lanes vectors, then the
 * scalar tail, then the lanes of the vector sum in order, added to the zero the output starts at. */
static float sum_of_squares(const float* x, int64_t n, int lanes) {
  /* ATen's multi_row_sum over `groups` groups of ILP vectors, its level step 2^power groups */
  const int64_t vectors = n / lanes, groups = vectors / ILP;
  const int64_t power = ceil_log2(groups) / LEVELS > 4 ? ceil_log2(groups) / LEVELS : 4;
  const int64_t step = (int64_t)1 << power, mask = step - 1;
  float acc[LEVELS][ILP][MAX_LANES];
  memset(acc, 0, sizeof(acc));
  int64_t i = 0;
#define ADD_GROUP(group)                                                          \
  for (int k = 0; k < ILP; k++)                                                   \
    for (int l = 0; l < lanes; l++) {                                             \
      const float v = x[((group) * ILP + k) * lanes + l];                          \
      acc[0][k][l] += v * v;                                                      \
    }
  while (i + step <= groups) {
    for (int64_t j = 0; j < step; j++, i++) {
      ADD_GROUP(i)
    }
    for (int j = 1; j < LEVELS; j++) {
      for (int k = 0; k < ILP; k++)
        for (int l = 0; l < lanes; l++) {
          acc[j][k][l] += acc[j - 1][k][l];
          acc[j - 1][k][l] = 0.0f;
        }
      if ((i & (mask << (j * power))) != 0) break;
    }
  }
  for (; i < groups; i++) {
    ADD_GROUP(i)
  }
#undef ADD_GROUP
  for (int j = 1; j < LEVELS; j++)
    for (int k = 0; k < ILP; k++)
      for (int l = 0; l < lanes; l++) acc[0][k][l] += acc[j][k][l];
  float* partial = acc[0][0];
  for (int64_t v = groups * ILP; v < vectors; v++)
    for (int l = 0; l < lanes; l++) {
      const float e = x[v * lanes + l];
      partial[l] += e * e;
    }
  for (int k = 1; k < ILP; k++)
    for (int l = 0; l < lanes; l++) partial[l] += acc[0][k][l];
  float total = 0.0f;
  for (int64_t e = vectors * lanes; e < n; e++) total += x[e] * x[e];
  for (int l = 0; l < lanes; l++) total += partial[l];
  return 0.0f + total;
}

int pn_rms_norm(const float* x, const float* weight, float* out, int64_t rows, int64_t n, float eps, int lanes) {
  if ((lanes != 4 && lanes != 8 && lanes != 16) || n < lanes) return -1;
  const float count = (float)n;
  for (int64_t r = 0; r < rows; r++) {
    const float* xr = x + r * n;
    float* o = out + r * n;
    const float mean = sum_of_squares(xr, n, lanes) / count;
    const float scale = 1.0f / sqrtf(mean + eps);
    for (int64_t i = 0; i < n; i++) {
      const float scaled = xr[i] * scale;
      o[i] = scaled * weight[i];
    }
  }
  return 0;
}

int pn_add_rms_norm(const float* a, const float* b, float* total, const float* weight, float* out, int64_t rows,
                    int64_t n, float eps, int lanes) {
  if ((lanes != 4 && lanes != 8 && lanes != 16) || n < lanes) return -1;
  const int64_t count = rows * n;
  for (int64_t i = 0; i < count; i++) total[i] = a[i] + b[i];
  return pn_rms_norm(total, weight, out, rows, n, eps, lanes);
}

void pn_rotary_pairs(const float* x, const float* cos, const float* sin, float* out, const int64_t sizes[4],
                     const int64_t cos_strides[4], const int64_t sin_strides[4]) {
  const float* xp = x;
  float* op = out;
  for (int64_t a = 0; a < sizes[0]; a++)
    for (int64_t b = 0; b < sizes[1]; b++)
      for (int64_t c = 0; c < sizes[2]; c++) {
        const float* cr = cos + a * cos_strides[0] + b * cos_strides[1] + c * cos_strides[2];
        const float* sr = sin + a * sin_strides[0] + b * sin_strides[1] + c * sin_strides[2];
        for (int64_t p = 0; p < sizes[3]; p++, xp += 2, op += 2) {
          const float x0 = xp[0], x1 = xp[1], co = cr[p * cos_strides[3]], si = sr[p * sin_strides[3]];
          const float first = x0 * co, other = x1 * si, second = x0 * si, third = x1 * co;
          op[0] = first - other;
          op[1] = second + third;
        }
      }
}
