/* XNNPACK's float depthwise 2-d convolution (f32-dwconv) over channels-last images: each output channel is its
 * input channel's window times its own kernel, plus its bias, clamped. PyTorch reaches this only through
 * oneDNN, which spent about 33 us a call on a 16 x 16 x 32 image and 300 us on MobileNetV2's 112 x 112 x 96
 * stride-2 layer at one thread; here each channel's accumulator starts at the bias and takes the window's taps
 * row by row with fused multiply-adds, as XNNPACK's kernels do, taps that fall in the padding skipped (they add
 * zero). The sums are XNNPACK's order, its kernels' tiling of taps aside, so outputs agree to float32 rounding
 * (not bit for bit). Denormals are off while it runs, as XNNPACK's operators run. One task is one output row. */
#include <string.h>

#include "native.h"

struct dwconv_job {
  const pn_dwconv* p;
  int family;
  int64_t inner0, inner1; /* the output columns whose windows lie inside the image */
};

/* Where one output row's windows lie: the first input row, and the kernel rows inside the image. */
struct row_span {
  int64_t y0, k0, k1;
};

#if defined(__x86_64__)
#include <immintrin.h>

/* One output row, a vector of channels at a time: the chunk's taps stay in registers across the row's pixels.
 * Pixels whose window lies inside the image (all but a kernel's width at the edges) take every tap unchecked. */
#define MAX_HELD 25 /* taps held in registers: 5 x 5; larger kernels read theirs from memory (L1) */

__attribute__((target("avx512f")))
static void row_avx512(const struct dwconv_job* job, const struct row_span* r, int64_t image, int64_t oy) {
  const pn_dwconv* p = job->p;
  const __m512 lo = _mm512_set1_ps(p->out_min), hi = _mm512_set1_ps(p->out_max);
  const float* x = p->x + image * p->h * p->w * p->c;
  float* out = p->y + (image * p->oh + oy) * p->ow * p->c;
  const int64_t c = p->c, taps = p->kh * p->kw, row = p->w * c;
  const int64_t y0 = r->y0, k0 = r->k0, k1 = r->k1, inner0 = job->inner0, inner1 = job->inner1;
  for (int64_t c0 = 0; c0 < c; c0 += 16) {
    const int64_t left = c - c0;
    const __mmask16 m = left >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
    const __m512 bias = p->bias ? _mm512_maskz_loadu_ps(m, p->bias + c0) : _mm512_setzero_ps();
    __m512 held[MAX_HELD];
    const int hold = taps <= MAX_HELD;
    if (hold)
      for (int64_t t = 0; t < taps; t++) held[t] = _mm512_maskz_loadu_ps(m, p->weights + t * c + c0);
    const int64_t step = p->sw * c;
    for (int64_t ox = 0; ox < p->ow;) {
      const int64_t x0 = ox * p->sw - p->left;
      if (ox >= inner0 && ox + 4 <= inner1) {
        /* four pixels inside the image: four independent chains of fused multiply-adds (one would wait 4 cycles
         * on each) */
        __m512 a0 = bias, a1 = bias, a2 = bias, a3 = bias;
        for (int64_t ki = k0; ki < k1; ki++) {
          const float* xr = x + (y0 + ki * p->dh) * row + c0;
          for (int64_t kj = 0; kj < p->kw; kj++) {
            const int64_t t = ki * p->kw + kj;
            const __m512 wv = hold ? held[t] : _mm512_maskz_loadu_ps(m, p->weights + t * c + c0);
            const float* xp = xr + (x0 + kj * p->dw) * c;
            a0 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, xp), wv, a0);
            a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, xp + step), wv, a1);
            a2 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, xp + 2 * step), wv, a2);
            a3 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, xp + 3 * step), wv, a3);
          }
        }
        float* o = out + ox * c + c0;
        _mm512_mask_storeu_ps(o, m, _mm512_min_ps(_mm512_max_ps(a0, lo), hi));
        _mm512_mask_storeu_ps(o + c, m, _mm512_min_ps(_mm512_max_ps(a1, lo), hi));
        _mm512_mask_storeu_ps(o + 2 * c, m, _mm512_min_ps(_mm512_max_ps(a2, lo), hi));
        _mm512_mask_storeu_ps(o + 3 * c, m, _mm512_min_ps(_mm512_max_ps(a3, lo), hi));
        ox += 4;
        continue;
      }
      __m512 acc = bias;
      for (int64_t ki = k0; ki < k1; ki++) {
        const float* xr = x + (y0 + ki * p->dh) * row + c0;
        for (int64_t kj = 0; kj < p->kw; kj++) {
          const int64_t ix = x0 + kj * p->dw;
          if (ix < 0 || ix >= p->w) continue;
          const int64_t t = ki * p->kw + kj;
          const __m512 wv = hold ? held[t] : _mm512_maskz_loadu_ps(m, p->weights + t * c + c0);
          acc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, xr + ix * c), wv, acc);
        }
      }
      _mm512_mask_storeu_ps(out + ox * c + c0, m, _mm512_min_ps(_mm512_max_ps(acc, lo), hi));
      ox++;
    }
  }
}

__attribute__((target("avx2,fma")))
static void row_avx2(const struct dwconv_job* job, const struct row_span* r, int64_t image, int64_t oy) {
  const pn_dwconv* p = job->p;
  const __m256 lo = _mm256_set1_ps(p->out_min), hi = _mm256_set1_ps(p->out_max);
  const float* x = p->x + image * p->h * p->w * p->c;
  float* out = p->y + (image * p->oh + oy) * p->ow * p->c;
  const int64_t c = p->c, taps = p->kh * p->kw, row = p->w * c;
  const int64_t y0 = r->y0, k0 = r->k0, k1 = r->k1, inner0 = job->inner0, inner1 = job->inner1;
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int64_t c0 = 0; c0 < c; c0 += 8) {
    const int64_t left = c - c0;
    const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(left >= 8 ? 8 : (int)left), lanes);
    const __m256 bias = p->bias ? _mm256_maskload_ps(p->bias + c0, m) : _mm256_setzero_ps();
    __m256 held[MAX_HELD];
    const int hold = taps <= MAX_HELD;
    if (hold)
      for (int64_t t = 0; t < taps; t++) held[t] = _mm256_maskload_ps(p->weights + t * c + c0, m);
    const int64_t step = p->sw * c;
    for (int64_t ox = 0; ox < p->ow;) {
      const int64_t x0 = ox * p->sw - p->left;
      if (ox >= inner0 && ox + 4 <= inner1) {
        __m256 a0 = bias, a1 = bias, a2 = bias, a3 = bias;
        for (int64_t ki = k0; ki < k1; ki++) {
          const float* xr = x + (y0 + ki * p->dh) * row + c0;
          for (int64_t kj = 0; kj < p->kw; kj++) {
            const int64_t t = ki * p->kw + kj;
            const __m256 wv = hold ? held[t] : _mm256_maskload_ps(p->weights + t * c + c0, m);
            const float* xp = xr + (x0 + kj * p->dw) * c;
            a0 = _mm256_fmadd_ps(_mm256_maskload_ps(xp, m), wv, a0);
            a1 = _mm256_fmadd_ps(_mm256_maskload_ps(xp + step, m), wv, a1);
            a2 = _mm256_fmadd_ps(_mm256_maskload_ps(xp + 2 * step, m), wv, a2);
            a3 = _mm256_fmadd_ps(_mm256_maskload_ps(xp + 3 * step, m), wv, a3);
          }
        }
        float* o = out + ox * c + c0;
        _mm256_maskstore_ps(o, m, _mm256_min_ps(_mm256_max_ps(a0, lo), hi));
        _mm256_maskstore_ps(o + c, m, _mm256_min_ps(_mm256_max_ps(a1, lo), hi));
        _mm256_maskstore_ps(o + 2 * c, m, _mm256_min_ps(_mm256_max_ps(a2, lo), hi));
        _mm256_maskstore_ps(o + 3 * c, m, _mm256_min_ps(_mm256_max_ps(a3, lo), hi));
        ox += 4;
        continue;
      }
      __m256 acc = bias;
      for (int64_t ki = k0; ki < k1; ki++) {
        const float* xr = x + (y0 + ki * p->dh) * row + c0;
        for (int64_t kj = 0; kj < p->kw; kj++) {
          const int64_t ix = x0 + kj * p->dw;
          if (ix < 0 || ix >= p->w) continue;
          const int64_t t = ki * p->kw + kj;
          const __m256 wv = hold ? held[t] : _mm256_maskload_ps(p->weights + t * c + c0, m);
          acc = _mm256_fmadd_ps(_mm256_maskload_ps(xr + ix * c, m), wv, acc);
        }
      }
      _mm256_maskstore_ps(out + ox * c + c0, m, _mm256_min_ps(_mm256_max_ps(acc, lo), hi));
      ox++;
    }
  }
}
#endif

static void dwconv_row(void* ctx, int64_t task) {
  const struct dwconv_job* job = ctx;
  const pn_dwconv* p = job->p;
  const int64_t image = task / p->oh, oy = task % p->oh;
  struct row_span r = {oy * p->sh - p->top, 0, p->kh};
  while (r.k0 < r.k1 && r.y0 + r.k0 * p->dh < 0) r.k0++;
  while (r.k1 > r.k0 && r.y0 + (r.k1 - 1) * p->dh >= p->h) r.k1--;
  const unsigned state = pn_denormals_off();
#if defined(__x86_64__)
  if (job->family == PN_VFAMILY_AVX512F)
    row_avx512(job, &r, image, oy);
  else
    row_avx2(job, &r, image, oy);
#else
  (void)image;
#endif
  pn_denormals_restore(state);
}

int pn_dwconv_f32(const pn_dwconv* p, int family, int threads) {
  if (family < 0 || family > 1 || !pn_vfamily_runs(family) || p->n < 0 || p->oh < 0 || p->ow < 0 || p->c < 0)
    return -1;
  struct dwconv_job job = {p, family, 0, p->ow};
  while (job.inner0 < p->ow && job.inner0 * p->sw - p->left < 0) job.inner0++;
  while (job.inner1 > job.inner0 && (job.inner1 - 1) * p->sw - p->left + (p->kw - 1) * p->dw >= p->w) job.inner1--;
  if (p->n > 0 && p->oh > 0 && p->ow > 0 && p->c > 0) pn_parallel(dwconv_row, &job, p->n * p->oh, threads);
  return 0;
}
