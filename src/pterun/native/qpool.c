/* 8-bit pooling on NHWC images: the global mean XNNPACK computes (an exact int32 sum over the pixels, then
 * float32(sum) * scale + zero, the zero points folded into `zero`, rounded half to even and clamped) and max
 * pooling (the largest 8-bit value of each window; padding never wins, then the node's clamp).
 *
 * Plain C over channels, which compilers vectorize: both read each input byte once and do a few operations on
 * it, so the memory, not the arithmetic, bounds them. Max pooling with AVX2 keeps a pixel's maxima in registers,
 * 32 channels at a time (16 for the rest), where the plain loops' set-up for a few channels cost more than the
 * reads. */
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
  int simd; /* max pooling: this CPU runs AVX2 */
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

static int8_t clamp8(int32_t v, int32_t lo, int32_t hi) { return (int8_t)(v < lo ? lo : v > hi ? hi : v); }

#if defined(__x86_64__)
#include <immintrin.h>

/* The window's taps of output pixel (oy, ox) inside the image: kernel rows [ky0, ky1), columns [kx0, kx1). */
static void window_inside(const pool_args* a, int64_t oy, int64_t ox, int64_t* ky0, int64_t* ky1, int64_t* kx0,
                          int64_t* kx1) {
  *ky0 = 0, *ky1 = a->kh, *kx0 = 0, *kx1 = a->kw;
  while (*ky0 < *ky1 && oy * a->sh - a->pt + *ky0 * a->dh < 0) (*ky0)++;
  while (*ky1 > *ky0 && oy * a->sh - a->pt + (*ky1 - 1) * a->dh >= a->h) (*ky1)--;
  while (*kx0 < *kx1 && ox * a->sw - a->pl + *kx0 * a->dw < 0) (*kx0)++;
  while (*kx1 > *kx0 && ox * a->sw - a->pl + (*kx1 - 1) * a->dw >= a->w) (*kx1)--;
}


__attribute__((target("avx2"))) static void max_pixel_avx2(const pool_args* a, const int8_t* image, int64_t oy,
                                                           int64_t ox, int8_t* y) {
  int64_t ky0, ky1, kx0, kx1;
  window_inside(a, oy, ox, &ky0, &ky1, &kx0, &kx1);
  const int64_t c = a->c;
  const int8_t lo8 = clamp8(a->qmin, -128, 127), hi8 = clamp8(a->qmax, -128, 127);
  /* the window's first tap, which may lie in the padding: only taps inside are read */
  const int64_t first = ((oy * a->sh - a->pt) * a->w + ox * a->sw - a->pl) * c;
  const int64_t row = a->dh * a->w * c, col = a->dw * c;
  int64_t i = 0;
  for (; i + 32 <= c; i += 32) {
    __m256i m = _mm256_set1_epi8(-128);
    for (int64_t ky = ky0; ky < ky1; ky++)
      for (int64_t kx = kx0; kx < kx1; kx++)
        m = _mm256_max_epi8(m, _mm256_loadu_si256((const __m256i*)(image + (first + ky * row + kx * col + i))));
    m = _mm256_min_epi8(_mm256_max_epi8(m, _mm256_set1_epi8(lo8)), _mm256_set1_epi8(hi8));
    _mm256_storeu_si256((__m256i*)(y + i), m);
  }
  for (; i + 16 <= c; i += 16) {
    __m128i m = _mm_set1_epi8(-128);
    for (int64_t ky = ky0; ky < ky1; ky++)
      for (int64_t kx = kx0; kx < kx1; kx++)
        m = _mm_max_epi8(m, _mm_loadu_si128((const __m128i*)(image + (first + ky * row + kx * col + i))));
    m = _mm_min_epi8(_mm_max_epi8(m, _mm_set1_epi8(lo8)), _mm_set1_epi8(hi8));
    _mm_storeu_si128((__m128i*)(y + i), m);
  }
  for (; i < c; i++) {
    int32_t m = -128;
    for (int64_t ky = ky0; ky < ky1; ky++)
      for (int64_t kx = kx0; kx < kx1; kx++) {
        const int8_t v = image[first + ky * row + kx * col + i];
        m = v > m ? v : m;
      }
    y[i] = clamp8(m, a->qmin, a->qmax);
  }
}
#endif

/* One output row of an image. */
static void max_task(void* ctx, int64_t row) {
  const pool_args* a = ctx;
  const int64_t c = a->c, oy = row % a->oh, ni = row / a->oh;
  const int8_t* image = a->x + ni * a->h * a->w * c;
  int8_t* y = a->y + row * a->ow * c;
#if defined(__x86_64__)
  if (a->simd) {
    for (int64_t ox = 0; ox < a->ow; ox++, y += c) max_pixel_avx2(a, image, oy, ox, y);
    return;
  }
#endif
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
    for (int64_t i = 0; i < c; i++) y[i] = clamp8(y[i], a->qmin, a->qmax);
  }
}

void pn_qmaxpool_s8(const int8_t* x, int8_t* y, int64_t n, int64_t h, int64_t w, int64_t c, int64_t oh, int64_t ow,
                    const int64_t* window, int32_t qmin, int32_t qmax, int threads) {
  pool_args a = {.x = x, .y = y, .h = h, .w = w, .c = c, .qmin = qmin, .qmax = qmax, .oh = oh, .ow = ow,
                 .kh = window[0], .kw = window[1], .sh = window[2], .sw = window[3], .dh = window[4],
                 .dw = window[5], .pt = window[6], .pl = window[7], .simd = pn_cpu_isa() != PN_PORTABLE};
  if (n * oh * ow * c * a.kh * a.kw < (INT64_C(1) << 17)) threads = 1;
  pn_parallel(max_task, &a, n * oh, threads);
}
