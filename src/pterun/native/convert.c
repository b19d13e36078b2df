/* XNNPACK's converts between float32 and signed 8-bit values of one scale and zero point, as its x86 kernels
 * compute them (f32-qs8-vcvt, qs8-f32-vcvt), and a table of 256 values applied to 8-bit ones.
 *
 *   quantize:   min(x * (1 / scale), 32767) (a NaN gives 32767: x86's minps returns its second operand), rounded
 *               half to even (cvtps; below INT32_MIN it gives INT32_MIN), saturated to int16 (packs), plus the
 *               zero point (saturating), saturated to int8;
 *   dequantize: float(q - zero point) * scale, one rounding.
 */
#include <stdint.h>

#include "native.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

static inline int8_t quantize1(float x, float scale, int32_t zp) {
  float v = x * scale;
  v = v < 32767.0f ? v : 32767.0f;
  int32_t q = v >= -32768.0f ? (int32_t)__builtin_rintf(v) : -32768;
  q += zp;
  return (int8_t)(q < -128 ? -128 : q > 127 ? 127 : q);
}

typedef struct {
  int isa;
  const int8_t* table;
  const void* x;
  void* y;
  int64_t n, per;
  float scale;
  int32_t zp;
} convert_args;

static void quantize_portable(const float* x, int8_t* y, int64_t n, float scale, int32_t zp) {
  for (int64_t i = 0; i < n; i++) y[i] = quantize1(x[i], scale, zp);
}

static void dequantize_portable(const int8_t* x, float* y, int64_t n, int32_t zp, float scale) {
  for (int64_t i = 0; i < n; i++) y[i] = (float)((int32_t)x[i] - zp) * scale;
}

#if defined(__x86_64__)

#define AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl")))
#define AVX2_TARGET __attribute__((target("avx2,fma")))

/* The saturations and the zero point in int32: the same results (the clamp to int16 first keeps the sum exact). */
static inline AVX512_TARGET __m128i quantize16(__m512 x, __m512 scale, __m512i zp) {
  const __m512 v = _mm512_min_ps(_mm512_mul_ps(x, scale), _mm512_set1_ps(32767.0f));
  __m512i q = _mm512_max_epi32(_mm512_cvtps_epi32(v), _mm512_set1_epi32(-32768));
  q = _mm512_add_epi32(q, zp);
  return _mm512_cvtsepi32_epi8(q);
}

static AVX512_TARGET void quantize_avx512(const float* x, int8_t* y, int64_t n, float s, int32_t z) {
  const __m512 scale = _mm512_set1_ps(s);
  const __m512i zp = _mm512_set1_epi32(z);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm_storeu_si128((__m128i*)(y + i), quantize16(_mm512_loadu_ps(x + i), scale, zp));
  if (i < n) {
    const __mmask16 mask = (__mmask16)((1u << (n - i)) - 1);
    _mm_mask_storeu_epi8(y + i, mask, quantize16(_mm512_maskz_loadu_ps(mask, x + i), scale, zp));
  }
}

static AVX512_TARGET void dequantize_avx512(const int8_t* x, float* y, int64_t n, int32_t z, float s) {
  const __m512 scale = _mm512_set1_ps(s);
  const __m512i zp = _mm512_set1_epi32(z);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mask = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
    const __m512i q = _mm512_sub_epi32(_mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(mask, x + i)), zp);
    _mm512_mask_storeu_ps(y + i, mask, _mm512_mul_ps(_mm512_cvtepi32_ps(q), scale));
  }
}

static AVX2_TARGET void quantize_avx2(const float* x, int8_t* y, int64_t n, float s, int32_t z) {
  const __m256 scale = _mm256_set1_ps(s), top = _mm256_set1_ps(32767.0f);
  const __m256i zp = _mm256_set1_epi32(z), bottom = _mm256_set1_epi32(-32768);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_min_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), scale), top);
    const __m256i q = _mm256_add_epi32(_mm256_max_epi32(_mm256_cvtps_epi32(v), bottom), zp);
    const __m128i q16 = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
    _mm_storel_epi64((__m128i*)(y + i), _mm_packs_epi16(q16, q16));
  }
  quantize_portable(x + i, y + i, n - i, s, z);
}

static AVX2_TARGET void dequantize_avx2(const int8_t* x, float* y, int64_t n, int32_t z, float s) {
  const __m256 scale = _mm256_set1_ps(s);
  const __m256i zp = _mm256_set1_epi32(z);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i q = _mm256_sub_epi32(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)(x + i))), zp);
    _mm256_storeu_ps(y + i, _mm256_mul_ps(_mm256_cvtepi32_ps(q), scale));
  }
  dequantize_portable(x + i, y + i, n - i, z, s);
}

#endif

void pn_quantize_s8_row(int isa, const float* x, int8_t* y, int64_t n, float inverse_scale, int32_t zero_point) {
#if defined(__x86_64__)
  if (isa == PN_AVX512VNNI) return quantize_avx512(x, y, n, inverse_scale, zero_point);
  if (isa == PN_AVX2) return quantize_avx2(x, y, n, inverse_scale, zero_point);
#endif
  (void)isa;
  quantize_portable(x, y, n, inverse_scale, zero_point);
}

static void lookup_portable(const int8_t* table, const int8_t* x, int8_t* y, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = table[(uint8_t)x[i]];
}

#if defined(__x86_64__)

/* 64 bytes at a time: vpermi2b looks up 128 entries by an index's low 7 bits, its top bit picks the half. */
static __attribute__((target("avx512f,avx512bw,avx512vl,avx512vbmi"))) void lookup_vbmi(const int8_t* table,
                                                                                       const int8_t* x, int8_t* y,
                                                                                       int64_t n) {
  const __m512i t0 = _mm512_loadu_si512(table), t1 = _mm512_loadu_si512(table + 64);
  const __m512i t2 = _mm512_loadu_si512(table + 128), t3 = _mm512_loadu_si512(table + 192);
  for (int64_t i = 0; i < n; i += 64) {
    const __mmask64 mask = n - i >= 64 ? ~(__mmask64)0 : (__mmask64)((~UINT64_C(0)) >> (64 - (n - i)));
    const __m512i v = _mm512_maskz_loadu_epi8(mask, x + i);
    const __m512i low = _mm512_permutex2var_epi8(t0, v, t1), high = _mm512_permutex2var_epi8(t2, v, t3);
    _mm512_mask_storeu_epi8(y + i, mask, _mm512_mask_blend_epi8(_mm512_movepi8_mask(v), low, high));
  }
}

static int has_vbmi(void) {
  static int known = -1;
  if (known < 0) {
    __builtin_cpu_init();
    known = __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512bw");
  }
  return known;
}

#endif

static void lookup_task(void* ctx, int64_t task) {
  const convert_args* a = ctx;
  const int64_t i = task * a->per, n = a->n - i < a->per ? a->n - i : a->per;
#if defined(__x86_64__)
  if (a->isa == PN_AVX512VNNI && has_vbmi()) return lookup_vbmi(a->table, (const int8_t*)a->x + i, (int8_t*)a->y + i, n);
#endif
  lookup_portable(a->table, (const int8_t*)a->x + i, (int8_t*)a->y + i, n);
}

static void quantize_task(void* ctx, int64_t task) {
  const convert_args* a = ctx;
  const int64_t i = task * a->per, n = a->n - i < a->per ? a->n - i : a->per;
  pn_quantize_s8_row(a->isa, (const float*)a->x + i, (int8_t*)a->y + i, n, a->scale, a->zp);
}

static void dequantize_task(void* ctx, int64_t task) {
  const convert_args* a = ctx;
  const int64_t i = task * a->per, n = a->n - i < a->per ? a->n - i : a->per;
  const int8_t* x = (const int8_t*)a->x + i;
  float* y = (float*)a->y + i;
#if defined(__x86_64__)
  if (a->isa == PN_AVX512VNNI) return dequantize_avx512(x, y, n, a->zp, a->scale);
  if (a->isa == PN_AVX2) return dequantize_avx2(x, y, n, a->zp, a->scale);
#endif
  dequantize_portable(x, y, n, a->zp, a->scale);
}

/* Pieces of 2^16 values at least: a worker's wake-up is worth no less. */
static void convert(pn_task task, convert_args* a, int threads) {
  if (a->n <= 0) return;
  a->per = a->n;
  if (threads > 1 && a->n >= (INT64_C(1) << 17)) {
    a->per = (a->n + 4 * threads - 1) / (4 * threads);
    if (a->per < (INT64_C(1) << 16)) a->per = INT64_C(1) << 16;
  }
  pn_parallel(task, a, (a->n + a->per - 1) / a->per, threads);
}

void pn_quantize_s8(int isa, const float* x, int8_t* y, int64_t n, float scale, int32_t zero_point, int threads) {
  convert_args a = {isa, NULL, x, y, n, 0, scale, zero_point};
  convert(quantize_task, &a, threads);
}

void pn_dequantize_s8(int isa, const int8_t* x, float* y, int64_t n, int32_t zero_point, float scale,
                      int threads) {
  convert_args a = {isa, NULL, x, y, n, 0, scale, zero_point};
  convert(dequantize_task, &a, threads);
}

void pn_lookup_s8(int isa, const int8_t* table, const int8_t* x, int8_t* y, int64_t n, int threads) {
  convert_args a = {isa, table, x, y, n, 0, 0.0f, 0};
  convert(lookup_task, &a, threads);
}
