/* A SwiGLU's SiLU-product as PyTorch's CPU kernels compute its three steps in float32: s = sigmoid(g), p = g * s,
 * out = p * u. PyTorch's sigmoid is 1 / ((0 - g).exp() + 1) over whole pairs of vectors (its vectorized loop takes
 * 2 * lanes values a step), exp being SLEEF's expf_u10 (its fused multiply-adds, its rounding to an integer, its
 * two-step ldexp), and 1 / (1 + expf(-g)) with libm's expf for the values past the last whole pair. Both are
 * repeated here value for value; kernels/fused.py checks them against PyTorch in the process before taking them.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "native.h"

#define R_LN2 1.442695040888963407359924681001892137426645954152985934135449406931f
#define L2U 0.693145751953125f
#define L2L 1.428606765330187045e-06f
static const float POLY[6] = {0.000198527617612853646278381f, 0.00139304355252534151077271f,
                              0.00833336077630519866943359f, 0.0416664853692054748535156f,
                              0.166666671633720397949219f, 0.5f};

static inline float pow2i(int32_t q) {
  const uint32_t bits = (uint32_t)(q + 0x7f) << 23;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

/* SLEEF's xexpf (sleefsimdsp.c, u10), one lane. */
static inline float sleef_expf(float d) {
  const int32_t q = (int32_t)rintf(d * R_LN2);
  const float qf = (float)q;
  float s = fmaf(qf, -L2U, d);
  s = fmaf(qf, -L2L, s);
  float u = POLY[0];
  for (int k = 1; k < 6; k++) u = fmaf(u, s, POLY[k]);
  u = 1.0f + fmaf(s * s, u, s);
  u = u * pow2i(q >> 1) * pow2i(q - (q >> 1));
  if (d < -104.0f) u = 0.0f;
  if (100.0f < d) u = INFINITY;
  return u;
}

#if defined(__x86_64__)
#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f")))

/* The same, sixteen lanes (the build PyTorch runs on AVX-512 CPUs). */
static inline AVX512 __m512 pow2i_512(__m512i q) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(q, _mm512_set1_epi32(0x7f)), 23));
}

static inline AVX512 __m512 sleef_expf_512(__m512 d) {
  const __m512i q = _mm512_cvt_roundps_epi32(_mm512_mul_ps(d, _mm512_set1_ps(R_LN2)),
                                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 qf = _mm512_cvtepi32_ps(q);
  __m512 s = _mm512_fmadd_ps(qf, _mm512_set1_ps(-L2U), d);
  s = _mm512_fmadd_ps(qf, _mm512_set1_ps(-L2L), s);
  __m512 u = _mm512_set1_ps(POLY[0]);
  for (int k = 1; k < 6; k++) u = _mm512_fmadd_ps(u, s, _mm512_set1_ps(POLY[k]));
  u = _mm512_add_ps(_mm512_set1_ps(1.0f), _mm512_fmadd_ps(_mm512_mul_ps(s, s), u, s));
  const __m512i half = _mm512_srai_epi32(q, 1);
  u = _mm512_mul_ps(_mm512_mul_ps(u, pow2i_512(half)), pow2i_512(_mm512_sub_epi32(q, half)));
  u = _mm512_maskz_mov_ps(~_mm512_cmp_ps_mask(d, _mm512_set1_ps(-104.0f), _CMP_LT_OQ), u);
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(_mm512_set1_ps(100.0f), d, _CMP_LT_OQ), u,
                              _mm512_set1_ps(INFINITY));
}

static AVX512 int64_t silu_mul_512(const float* g, const float* u, float* sig, float* prod, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_loadu_ps(g + i);
    const __m512 e = sleef_expf_512(_mm512_sub_ps(_mm512_setzero_ps(), x));
    const __m512 s = _mm512_div_ps(_mm512_set1_ps(1.0f), _mm512_add_ps(e, _mm512_set1_ps(1.0f)));
    const __m512 p = _mm512_mul_ps(x, s);
    _mm512_storeu_ps(sig + i, s);
    _mm512_storeu_ps(prod + i, p);
    _mm512_storeu_ps(out + i, _mm512_mul_ps(p, _mm512_loadu_ps(u + i)));
  }
  return i;
}
#endif

static inline float vector_sigmoid(float g) { return 1.0f / (sleef_expf(0.0f - g) + 1.0f); }
static inline float scalar_sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }

void pn_silu_mul(const float* g, const float* u, float* sig, float* prod, float* out, int64_t n, int lanes) {
  const int64_t whole = lanes > 0 ? n / (2 * lanes) * (2 * lanes) : 0;
#if defined(__x86_64__)
  const int64_t done = pn_cpu_isa() >= PN_AVX512VNNI ? silu_mul_512(g, u, sig, prod, out, whole) : 0;
#else
  const int64_t done = 0;
#endif
  for (int64_t i = done; i < n; i++) {
    const float s = i < whole ? vector_sigmoid(g[i]) : scalar_sigmoid(g[i]);
    const float p = g[i] * s;
    sig[i] = s;
    prod[i] = p;
    out[i] = p * u[i];
  }
}
