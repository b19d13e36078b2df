/* XNNPACK's float products (f32-gemm, f32-igemm): fully connected layers and dense convolutions over channels-last
 * images, as XNNPACK's x86 kernels compute each output: its accumulator starts at the bias and takes the window's
 * taps in order (kernel row, then column), each tap's input channels in order, one fused multiply-add each, then
 * the clamp (max with the low bound, then min with the high one). A tap in the padding reads zeros, as XNNPACK's
 * indirection points it at a zero buffer. Every output is then XNNPACK's own bits, whatever tile of outputs a
 * kernel holds. PyTorch's ways to a small product (addmm and the clamp apart, oneDNN's convolution) cost 3-30 us a
 * call; this one is the arithmetic and a few hundred nanoseconds. Denormals are off while it runs, as XNNPACK's
 * operators run. A fully connected layer is the 1 x 1 convolution of an image of one column.
 *
 * The weights are packed once (native.py's conv_pack): per tile of 16 output channels, their 16 biases, then for
 * each tap and input channel the 16 weights, zeros past the last output channel. One task is a group of four tiles
 * for a band of output pixels: pixels eight at a time (four with AVX2), the rest one at a time with the group's
 * tiles side by side, so that four chains of fused multiply-adds run at once where one would wait on each. */
#include <stdlib.h>

#include "native.h"

#define NR 16
#define GROUP 4 /* tiles a task covers */
#define ROWS_PER_TASK 64
#define MAX_TAPS 256 /* 16 x 16 (a vision transformer's patches); a wider window takes PyTorch's convolution */

struct conv_job {
  const pn_conv* p;
  int family;
  int64_t bands;
  const float* zeros; /* cin of them */
  int pointwise;      /* one tap, stride 1, no padding: output pixel k reads input pixel k */
};

#if defined(__x86_64__)
#include <immintrin.h>

/* The input row (cin channels) of each tap of output pixels `pixel` to `pixel + count - 1`, `taps` pointers a
 * pixel, or the zeros where a tap is padding. The first pixel's place is divided out, the next ones' stepped to:
 * three divisions a pixel cost a third of a small layer's time. */
static void taps_of(const struct conv_job* job, int64_t pixel, int64_t count, const float** at) {
  const pn_conv* p = job->p;
  if (job->pointwise) { /* one tap, stride 1, no padding: output pixel k reads input pixel k */
    for (int64_t k = 0; k < count; k++) at[k] = p->x + (pixel + k) * p->cin;
    return;
  }
  const int64_t plane = p->oh * p->ow;
  int64_t image = pixel / plane, oy = pixel % plane / p->ow, ox = pixel % p->ow, t = 0;
  for (int64_t k = 0; k < count; k++) {
    for (int64_t ky = 0; ky < p->kh; ky++)
      for (int64_t kx = 0; kx < p->kw; kx++, t++) {
        const int64_t iy = oy * p->sh - p->top + ky * p->dh, ix = ox * p->sw - p->left + kx * p->dw;
        at[t] = iy >= 0 && iy < p->h && ix >= 0 && ix < p->w ? p->x + ((image * p->h + iy) * p->w + ix) * p->cin
                                                             : job->zeros;
      }
    if (++ox == p->ow) {
      ox = 0;
      if (++oy == p->oh) oy = 0, image++;
    }
  }
}


/* MR pixels of one tile: each pixel's 16 accumulators in one register; the weights' vector read once per input
 * for all MR pixels. */
#define TILE_AVX512(MR)                                                                                        \
  __attribute__((target("avx512f"))) static void tile##MR##_avx512(const pn_conv* p, const float* w,          \
                                                                     const float* const* at, int64_t taps,    \
                                                                     float* y, __mmask16 m) {                 \
    __m512 acc[MR];                                                                                            \
    const __m512 bias = _mm512_loadu_ps(w);                                                                    \
    for (int r = 0; r < MR; r++) acc[r] = bias;                                                                \
    const float* wi = w + NR;                                                                                  \
    for (int64_t t = 0; t < taps; t++)                                                                         \
      for (int64_t i = 0; i < p->cin; i++, wi += NR) {                                                         \
        const __m512 wv = _mm512_loadu_ps(wi);                                                                 \
        for (int r = 0; r < MR; r++) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(at[r * taps + t][i]), wv, acc[r]); \
      }                                                                                                        \
    const __m512 lo = _mm512_set1_ps(p->out_min), hi = _mm512_set1_ps(p->out_max);                             \
    for (int r = 0; r < MR; r++)                                                                               \
      _mm512_mask_storeu_ps(y + r * p->cout, m, _mm512_min_ps(_mm512_max_ps(acc[r], lo), hi));                 \
  }
TILE_AVX512(8)

/* One pixel against the group's `tiles` tiles (up to four), their chains side by side. */
__attribute__((target("avx512f"))) static void pixel_avx512(const pn_conv* p, const float* w, int64_t tiles,
                                                            const float* const* at, int64_t taps, float* y,
                                                            int64_t outputs) {
  const int64_t stride = (1 + taps * p->cin) * NR;
  __m512 acc[GROUP];
  for (int64_t g = 0; g < GROUP; g++) acc[g] = g < tiles ? _mm512_loadu_ps(w + g * stride) : _mm512_setzero_ps();
  const float* wi = w + NR;
  for (int64_t t = 0; t < taps; t++)
    for (int64_t i = 0; i < p->cin; i++, wi += NR) {
      const __m512 xv = _mm512_set1_ps(at[t][i]);
      for (int64_t g = 0; g < GROUP; g++)
        if (g < tiles) acc[g] = _mm512_fmadd_ps(xv, _mm512_loadu_ps(wi + g * stride), acc[g]);
    }
  const __m512 lo = _mm512_set1_ps(p->out_min), hi = _mm512_set1_ps(p->out_max);
  for (int64_t g = 0; g < tiles; g++) {
    const int64_t left = outputs - g * NR;
    const __mmask16 m = left >= NR ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1);
    _mm512_mask_storeu_ps(y + g * NR, m, _mm512_min_ps(_mm512_max_ps(acc[g], lo), hi));
  }
}

__attribute__((target("avx2,fma"))) static __m256i lanes_below(int64_t count) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(count >= 8 ? 8 : count > 0 ? (int)count : 0),
                            _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* The same with two 8-lane registers a pixel. */
#define TILE_AVX2(MR)                                                                                          \
  __attribute__((target("avx2,fma"))) static void tile##MR##_avx2(const pn_conv* p, const float* w,           \
                                                                    const float* const* at, int64_t taps,     \
                                                                    float* y, int64_t left) {                 \
    __m256 acc0[MR], acc1[MR];                                                                                 \
    const __m256 b0 = _mm256_loadu_ps(w), b1 = _mm256_loadu_ps(w + 8);                                         \
    for (int r = 0; r < MR; r++) acc0[r] = b0, acc1[r] = b1;                                                   \
    const float* wi = w + NR;                                                                                  \
    for (int64_t t = 0; t < taps; t++)                                                                         \
      for (int64_t i = 0; i < p->cin; i++, wi += NR) {                                                         \
        const __m256 w0 = _mm256_loadu_ps(wi), w1 = _mm256_loadu_ps(wi + 8);                                   \
        for (int r = 0; r < MR; r++) {                                                                         \
          const __m256 xv = _mm256_broadcast_ss(at[r * taps + t] + i);                                         \
          acc0[r] = _mm256_fmadd_ps(xv, w0, acc0[r]);                                                          \
          acc1[r] = _mm256_fmadd_ps(xv, w1, acc1[r]);                                                          \
        }                                                                                                      \
      }                                                                                                        \
    const __m256 lo = _mm256_set1_ps(p->out_min), hi = _mm256_set1_ps(p->out_max);                             \
    const __m256i m0 = lanes_below(left), m1 = lanes_below(left - 8);                                          \
    for (int r = 0; r < MR; r++) {                                                                             \
      _mm256_maskstore_ps(y + r * p->cout, m0, _mm256_min_ps(_mm256_max_ps(acc0[r], lo), hi));                 \
      _mm256_maskstore_ps(y + r * p->cout + 8, m1, _mm256_min_ps(_mm256_max_ps(acc1[r], lo), hi));             \
    }                                                                                                          \
  }
TILE_AVX2(4)

__attribute__((target("avx2,fma"))) static void pixel_avx2(const pn_conv* p, const float* w, int64_t tiles,
                                                           const float* const* at, int64_t taps, float* y,
                                                           int64_t outputs) {
  const int64_t stride = (1 + taps * p->cin) * NR;
  __m256 acc0[GROUP], acc1[GROUP];
  for (int64_t g = 0; g < GROUP; g++) {
    acc0[g] = g < tiles ? _mm256_loadu_ps(w + g * stride) : _mm256_setzero_ps();
    acc1[g] = g < tiles ? _mm256_loadu_ps(w + g * stride + 8) : _mm256_setzero_ps();
  }
  const float* wi = w + NR;
  for (int64_t t = 0; t < taps; t++)
    for (int64_t i = 0; i < p->cin; i++, wi += NR) {
      const __m256 xv = _mm256_broadcast_ss(at[t] + i);
      for (int64_t g = 0; g < GROUP; g++)
        if (g < tiles) {
          acc0[g] = _mm256_fmadd_ps(xv, _mm256_loadu_ps(wi + g * stride), acc0[g]);
          acc1[g] = _mm256_fmadd_ps(xv, _mm256_loadu_ps(wi + g * stride + 8), acc1[g]);
        }
    }
  const __m256 lo = _mm256_set1_ps(p->out_min), hi = _mm256_set1_ps(p->out_max);
  for (int64_t g = 0; g < tiles; g++) {
    const int64_t left = outputs - g * NR;
    _mm256_maskstore_ps(y + g * NR, lanes_below(left), _mm256_min_ps(_mm256_max_ps(acc0[g], lo), hi));
    _mm256_maskstore_ps(y + g * NR + 8, lanes_below(left - 8), _mm256_min_ps(_mm256_max_ps(acc1[g], lo), hi));
  }
}
#endif

static void conv_task(void* ctx, int64_t task) {
  const struct conv_job* job = ctx;
  const pn_conv* p = job->p;
  const int64_t group = task / job->bands, band = task % job->bands, tiles_all = (p->cout + NR - 1) / NR;
  const int64_t first = group * GROUP, tiles = tiles_all - first < GROUP ? tiles_all - first : GROUP;
  const int64_t pixels = p->n * p->oh * p->ow, taps = p->kh * p->kw, stride = (1 + taps * p->cin) * NR;
  const int64_t r0 = band * ROWS_PER_TASK, r1 = r0 + ROWS_PER_TASK < pixels ? r0 + ROWS_PER_TASK : pixels;
  const float* w = p->packed + first * stride;
  const float* at[8 * MAX_TAPS];
  const unsigned state = pn_denormals_off();
#if defined(__x86_64__)
  const int avx512 = job->family == PN_VFAMILY_AVX512F, mr = avx512 ? 8 : 4;
  int64_t r = r0;
  for (; r + mr <= r1; r += mr) {
    taps_of(job, r, mr, at);
    for (int64_t g = first; g < first + tiles; g++) {
      const int64_t left = p->cout - g * NR;
      const float* wg = p->packed + g * stride;
      float* y = p->y + r * p->cout + g * NR;
      if (avx512)
        tile8_avx512(p, wg, at, taps, y, left >= NR ? (__mmask16)0xFFFF : (__mmask16)((1u << left) - 1));
      else
        tile4_avx2(p, wg, at, taps, y, left);
    }
  }
  for (; r < r1; r++) {
    taps_of(job, r, 1, at);
    if (avx512)
      pixel_avx512(p, w, tiles, at, taps, p->y + r * p->cout + first * NR, p->cout - first * NR);
    else
      pixel_avx2(p, w, tiles, at, taps, p->y + r * p->cout + first * NR, p->cout - first * NR);
  }
#else
  (void)w, (void)tiles, (void)r0, (void)r1, (void)at;
#endif
  pn_denormals_restore(state);
}

int pn_conv_f32(const pn_conv* p, int family, int threads) {
  if (family < 0 || family > 1 || !pn_vfamily_runs(family) || p->n < 0 || p->oh < 0 || p->ow < 0 || p->cin < 0
      || p->cout < 0 || p->kh < 1 || p->kw < 1 || p->kh * p->kw > MAX_TAPS)
    return -1;
  const int64_t pixels = p->n * p->oh * p->ow;
  if (pixels == 0 || p->cout == 0) return 0;
  float* zeros = calloc(p->cin ? (size_t)p->cin : 1, sizeof(float));
  if (!zeros) return -2;
  const int64_t groups = ((p->cout + NR - 1) / NR + GROUP - 1) / GROUP;
  const int pointwise = p->kh == 1 && p->kw == 1 && p->sh == 1 && p->sw == 1 && p->top == 0 && p->left == 0
                        && p->oh == p->h && p->ow == p->w;
  struct conv_job job = {p, family, (pixels + ROWS_PER_TASK - 1) / ROWS_PER_TASK, zeros, pointwise};
  /* Work below a worker's wake-up stays on the calling thread. */
  if (pixels * p->kh * p->kw * p->cin * p->cout < ((int64_t)1 << 20)) threads = 1;
  pn_parallel(conv_task, &job, groups * job.bands, threads);
  free(zeros);
  return 0;
}
