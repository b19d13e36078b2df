/* Layer normalization of float32 rows as ExecuTorch computes it for rows shorter than 256 values: its portable
 * kernel's scalar loop (kernels/portable/cpu/util/normalization_ops_util.h, layer_norm_scalar), which its
 * optimized kernel runs too below that length. Per row: the sum and the sum of squares in order from the first
 * value, each step rounded to float; the mean and E[x^2] divided by the row's length; the variance as
 * E[x^2] - mean * mean; std = sqrt(variance + eps); then each value (x - mean) / std * weight + bias, and the
 * row's mean and 1 / std. Every step is one IEEE operation rounded to float (-ffp-contract=off keeps products and
 * sums apart; sqrtf is correctly rounded), so the bits are ExecuTorch's whatever the instruction set. One
 * exception: a row whose variance is tiny next to its mean squared, where E[x^2] - mean^2 cancels most of its bits
 * and ExecuTorch's result is off PyTorch's (by up to NaN), takes its mean and variance in double in two passes,
 * PyTorch's result up to rounding: where ExecuTorch is wrong, pterun agrees with PyTorch.
 *
 * Sums in order cannot be split inside a row; ROWS rows are summed side by side instead, each in its own order,
 * which hides the additions' latency. */
#include <math.h>

#include "native.h"

#define ROWS 8
/* The variance's share of mean^2 below which E[x^2] - mean^2 has lost more bits than PyTorch's tolerance for it:
 * 2^-4, a mean 4 deviations from 0 (a row 12 deviations out lost 2e-5 in the fuzzer's regression). */
#define CANCELLED 0x1p-4f

typedef struct {
  const float* x;
  const float* weight;
  const float* bias;
  float* y;
  float* mean;
  float* rstd;
  int64_t rows, n, per_task;
  float eps;
} layer_norm_args;

static void normalize(const layer_norm_args* a, int64_t r, float sum, float squares) {
  const int64_t n = a->n;
  const float* x = a->x + r * n;
  float* y = a->y + r * n;
  const float count = (float)n;
  float mean = sum / count;
  float variance = squares / count - mean * mean;
  if (variance < mean * mean * CANCELLED) {
    /* E[x^2] - mean^2 has cancelled most of its bits (ExecuTorch's result is off PyTorch's, by up to NaN where
     * the difference comes out below -eps): the mean and the variance again, exactly enough, in two passes in
     * double, as far from PyTorch's as its own rounding. */
    double total = 0.0, spread = 0.0;
    for (int64_t j = 0; j < n; j++) total += x[j];
    const double m = total / (double)n;
    for (int64_t j = 0; j < n; j++) spread += ((double)x[j] - m) * ((double)x[j] - m);
    mean = (float)m;
    variance = (float)(spread / (double)n);
  }
  const float std = sqrtf(variance + a->eps);
  for (int64_t j = 0; j < n; j++) {
    const float w = a->weight ? a->weight[j] : 1.0f;
    const float b = a->bias ? a->bias[j] : 0.0f;
    y[j] = (x[j] - mean) / std * w + b;
  }
  a->mean[r] = mean;
  a->rstd[r] = (float)(1.0 / std);
}

static void layer_norm_task(void* ctx, int64_t task) {
  const layer_norm_args* a = ctx;
  const int64_t n = a->n;
  const int64_t begin = task * a->per_task;
  const int64_t end = begin + a->per_task < a->rows ? begin + a->per_task : a->rows;
  int64_t r = begin;
  for (; r + ROWS <= end; r += ROWS) {
    float sum[ROWS] = {0}, squares[ROWS] = {0};
    const float* x = a->x + r * n;
    for (int64_t j = 0; j < n; j++)
      for (int k = 0; k < ROWS; k++) {
        const float v = x[k * n + j];
        sum[k] += v;
        squares[k] += v * v;
      }
    for (int k = 0; k < ROWS; k++) normalize(a, r + k, sum[k], squares[k]);
  }
  for (; r < end; r++) {
    float sum = 0.0f, squares = 0.0f;
    const float* x = a->x + r * n;
    for (int64_t j = 0; j < n; j++) {
      sum += x[j];
      squares += x[j] * x[j];
    }
    normalize(a, r, sum, squares);
  }
}

int pn_layer_norm(const float* x, const float* weight, const float* bias, float* y, float* mean, float* rstd,
                  int64_t rows, int64_t n, float eps, int threads) {
  if (rows < 0 || n < 1 || n >= PN_LAYER_NORM_LONGEST) return -1;
  /* A task of at least 64 rows' or 16384 values' worth: a short call stays on the calling thread. */
  int64_t per_task = 16384 / n;
  if (per_task < 64) per_task = 64;
  per_task = (per_task + ROWS - 1) / ROWS * ROWS;
  layer_norm_args a = {x, weight, bias, y, mean, rstd, rows, n, per_task, eps};
  pn_parallel(layer_norm_task, &a, (rows + per_task - 1) / per_task, threads);
  return 0;
}
