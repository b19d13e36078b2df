/* XNNPACK's dynamic quantization of float rows (qd8), as its x86 kernels compute it.
 *
 * A row's minimum and maximum are the same in any order but for the sign of a zero, which changes neither the
 * zero point nor the scale below; so the SIMD kernels take them lane by lane, and a row holding a NaN (whose
 * minimum and maximum do depend on the order) takes the scalar loop, in the row's order. The values are then
 * converted as f32-qs8-vcvt converts them (convert.c). */
#include <math.h>

#include "native.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

/* XNNPACK's math_min_f32 / math_max_f32 on x86: the second operand unless the comparison holds (NaN loses). */
static inline float x86_min(float a, float b) { return b < a ? b : a; }
static inline float x86_max(float a, float b) { return b < a ? a : b; }

static void minmax_scalar(const float* row, int64_t cols, float* lo_out, float* hi_out) {
  float lo = cols ? row[0] : 0.0f, hi = lo;
  for (int64_t i = 1; i < cols; i++) {
    lo = row[i] < lo ? row[i] : lo;
    hi = row[i] > hi ? row[i] : hi;
  }
  *lo_out = lo;
  *hi_out = hi;
}

#if defined(__x86_64__)

/* 0 where the row holds a NaN (the caller then takes the scalar loop) */
static __attribute__((target("avx512f,avx512bw,avx512vl"))) int minmax_avx512(const float* row, int64_t cols,
                                                                             float* lo, float* hi) {
  __m512 vlo = _mm512_set1_ps(INFINITY), vhi = _mm512_set1_ps(-INFINITY);
  __mmask16 nan = 0;
  for (int64_t i = 0; i < cols; i += 16) {
    const __mmask16 mask = cols - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (cols - i)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(mask, row + i);
    nan |= _mm512_mask_cmp_ps_mask(mask, v, v, _CMP_UNORD_Q);
    vlo = _mm512_mask_min_ps(vlo, mask, vlo, v);
    vhi = _mm512_mask_max_ps(vhi, mask, vhi, v);
  }
  *lo = _mm512_reduce_min_ps(vlo);
  *hi = _mm512_reduce_max_ps(vhi);
  return nan == 0;
}

static __attribute__((target("avx2,fma"))) int minmax_avx2(const float* row, int64_t cols, float* lo, float* hi) {
  __m256 vlo = _mm256_set1_ps(INFINITY), vhi = _mm256_set1_ps(-INFINITY), nan = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= cols; i += 8) {
    const __m256 v = _mm256_loadu_ps(row + i);
    nan = _mm256_or_ps(nan, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
    vlo = _mm256_min_ps(vlo, v);
    vhi = _mm256_max_ps(vhi, v);
  }
  float l[8], h[8];
  _mm256_storeu_ps(l, vlo);
  _mm256_storeu_ps(h, vhi);
  float a = l[0], b = h[0];
  for (int j = 1; j < 8; j++) {
    a = l[j] < a ? l[j] : a;
    b = h[j] > b ? h[j] : b;
  }
  for (; i < cols; i++) {
    if (row[i] != row[i]) return 0;
    a = row[i] < a ? row[i] : a;
    b = row[i] > b ? row[i] : b;
  }
  *lo = a;
  *hi = b;
  return _mm256_movemask_ps(nan) == 0;
}

#endif

void pn_quantize_rows(int isa, const float* x, int64_t rows, int64_t cols, int64_t x_stride, int8_t* q,
                      int64_t q_stride, float* zero_point, float* scale) {
  for (int64_t r = 0; r < rows; r++) {
    const float* row = x + r * x_stride;
    int8_t* out = q + r * q_stride;
    float lo, hi;
    int done = 0;
#if defined(__x86_64__)
    if (cols > 0 && isa == PN_AVX512VNNI) done = minmax_avx512(row, cols, &lo, &hi);
    if (cols > 0 && isa == PN_AVX2) done = minmax_avx2(row, cols, &lo, &hi);
#endif
    if (!done) minmax_scalar(row, cols, &lo, &hi);
    /* xnn_qd8_asymmetric_quantization_params */
    const float rmin = x86_min(0.0f, lo), rmax = x86_max(0.0f, hi);
    const float s = rmin == rmax ? 1.0f : 255.0f / (rmax - rmin);
    const float descaled_min = rmin * s, descaled_max = rmax * s;
    const float from_min = -128.0f + descaled_min, from_max = 127.0f + descaled_max;
    float zp = from_min + from_max > 0 ? -128.0f - descaled_min : 127.0f - descaled_max;
    zp = x86_min(x86_max(zp, -128.0f), 127.0f);
    const int32_t z = (int32_t)lrintf(zp);
    zero_point[r] = (float)z;
    scale[r] = 1.0f / s;
    pn_quantize_s8_row(isa, row, out, cols, s, z);
  }
}
