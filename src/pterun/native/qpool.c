/* 8-bit pooling on NHWC images: the global mean XNNPACK computes (an exact int32 sum over the pixels, then
 * float32(sum) * scale + zero, the zero points folded into `zero`, rounded half to even and clamped) and max
 * pooling (the largest 8-bit value of each window; padding never wins, then the node's clamp).
 *
 * Plain C over channels, which compilers vectorize: both read each input byte once and do a few operations on
 * it, so the memory, not the arithmetic, bounds them. */
#include <stdlib.h>
#include <string.h>

#include "native.h"

typedef struct {
  const int8_t* x;
  int8_t* y;
  int64_t h, w, c;
  float scale, zero;
  int32_t qmin, qmax;
  int64_t oh, ow, kh, kw, sh, sw, dh, dw, pt, pl;
  _Atomic int failed;
} pool_args;

static void mean_task(void* ctx, int64_t image) {
  pool_args* a = ctx;
  const int64_t c = a->c, pixels = a->h * a->w;
  int32_t sums[256];
  int32_t* acc = c <= 256 ? sums : malloc((size_t)c * sizeof(int32_t));
  if (!acc) {
    a->failed = 1;
    return;
  }
  memset(acc, 0, (size_t)c * sizeof(int32_t));
  const int8_t* x = a->x + image * pixels * c;
  for (int64_t p = 0; p < pixels; p++)
    for (int64_t i = 0; i < c; i++) acc[i] += x[p * c + i];
  int8_t* y = a->y + image * c;
  for (int64_t i = 0; i < c; i++) {
    const float v = (float)acc[i] * a->scale + a->zero; /* two roundings: no fused multiply-add */
    const float r = __builtin_rintf(v);
    y[i] = (int8_t)(r < (float)a->qmin ? a->qmin : r > (float)a->qmax ? a->qmax : (int32_t)r);
  }
  if (acc != sums) free(acc);
}

int pn_qmean_s8(const int8_t* x, int8_t* y, int64_t n, int64_t h, int64_t w, int64_t c, float scale, float zero,
                int32_t qmin, int32_t qmax, int threads) {
  pool_args a = {.x = x, .y = y, .h = h, .w = w, .c = c, .scale = scale, .zero = zero, .qmin = qmin, .qmax = qmax};
  if (n * h * w * c < (INT64_C(1) << 17)) threads = 1;
  pn_parallel(mean_task, &a, n, threads);
  return a.failed ? -1 : 0;
}

/* One output row of an image. */
static void max_task(void* ctx, int64_t row) {
  const pool_args* a = ctx;
  const int64_t c = a->c, oy = row % a->oh, ni = row / a->oh;
  const int8_t* image = a->x + ni * a->h * a->w * c;
  int8_t* y = a->y + row * a->ow * c;
  for (int64_t ox = 0; ox < a->ow; ox++, y += c) {
    memset(y, -128, (size_t)c);
    for (int64_t ky = 0; ky < a->kh; ky++) {
      const int64_t iy = oy * a->sh - a->pt + ky * a->dh;
      if (iy < 0 || iy >= a->h) continue;
      for (int64_t kx = 0; kx < a->kw; kx++) {
        const int64_t ix = ox * a->sw - a->pl + kx * a->dw;
        if (ix < 0 || ix >= a->w) continue;
        const int8_t* p = image + (iy * a->w + ix) * c;
        for (int64_t i = 0; i < c; i++) y[i] = p[i] > y[i] ? p[i] : y[i];
      }
    }
    for (int64_t i = 0; i < c; i++) y[i] = (int8_t)(y[i] < a->qmin ? a->qmin : y[i] > a->qmax ? a->qmax : y[i]);
  }
}

void pn_qmaxpool_s8(const int8_t* x, int8_t* y, int64_t n, int64_t h, int64_t w, int64_t c, int64_t oh, int64_t ow,
                    const int64_t* window, int32_t qmin, int32_t qmax, int threads) {
  pool_args a = {.x = x, .y = y, .h = h, .w = w, .c = c, .qmin = qmin, .qmax = qmax, .oh = oh, .ow = ow,
                 .kh = window[0], .kw = window[1], .sh = window[2], .sw = window[3], .dh = window[4],
                 .dw = window[5], .pt = window[6], .pl = window[7]};
  if (n * oh * ow * c * a.kh * a.kw < (INT64_C(1) << 17)) threads = 1;
  pn_parallel(max_task, &a, n * oh, threads);
}
