/* 8-bit additions and multiplications with requantization, broadcasting: XNNPACK's qs8 vadd and vmul kernels
 * (and their vaddc / vmulc forms for an operand broadcast along the innermost dimension), as its x86 kernels
 * compute them.
 *
 *   add: ((a * a_multiplier + b * b_multiplier + bias) >> shift), an arithmetic shift in wrapping int32 (the
 *        multipliers, shift and bias, which folds in the zero points and the rounding, come from the caller,
 *        as xnn_init_qs8_add_minmax_scalar_params makes them); then saturated to int16 (packs), plus the output
 *        zero point (saturating), saturated to int8 and clamped to [qmin, qmax].
 *   mul: float((a - a_zero_point) * (b - b_zero_point)) * scale, rounded half to even (cvtps), then the same
 *        steps from the saturation to int16 on (XNNPACK's fp32 vmul: no clamp before the rounding).
 *
 * The shifted sum is below 2^20 in magnitude and the rounded product below 2^24, so the saturations to int16
 * and int8 change nothing that the clamp does not: out = clamp(value + zero point, qmin, qmax) in int32.
 */
#include <stdlib.h>
#include <string.h>

#include "native.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define DIMS 6

struct pn_qbinary {
  int isa, op; /* PN_QADD or PN_QMUL */
  int ndim;    /* after merging dimensions, at least 1 */
  int64_t shape[DIMS], a_stride[DIMS], b_stride[DIMS];
  int64_t total;
  int32_t a_multiplier, b_multiplier, bias, shift; /* add */
  int32_t a_zero_point, b_zero_point;              /* mul */
  float scale;                                     /* mul */
  int32_t ozp, qmin, qmax;
};

static inline int32_t finish(int32_t v, const pn_qbinary* L) {
  v += L->ozp;
  return v < L->qmin ? L->qmin : v > L->qmax ? L->qmax : v;
}

static inline int32_t add1(int32_t a, int32_t b, const pn_qbinary* L) {
  const uint32_t acc = (uint32_t)L->bias + (uint32_t)a * (uint32_t)L->a_multiplier +
                       (uint32_t)b * (uint32_t)L->b_multiplier;
  return finish((int32_t)acc >> L->shift, L);
}

static inline int32_t mul1(int32_t a, int32_t b, const pn_qbinary* L) {
  const float v = (float)((a - L->a_zero_point) * (b - L->b_zero_point)) * L->scale;
  return finish((int32_t)__builtin_rintf(v), L);
}

/* y[i] = op(a[i * sa], b[i * sb]) for i in [0, n) */
static void row_portable(const pn_qbinary* L, const int8_t* a, int64_t sa, const int8_t* b, int64_t sb, int8_t* y,
                         int64_t n) {
  if (L->op == PN_QADD)
    for (int64_t i = 0; i < n; i++) y[i] = (int8_t)add1(a[i * sa], b[i * sb], L);
  else
    for (int64_t i = 0; i < n; i++) y[i] = (int8_t)mul1(a[i * sa], b[i * sb], L);
}

#if defined(__x86_64__)

#define AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl")))
#define AVX2_TARGET __attribute__((target("avx2,fma")))

/* 16 values of a and of b (int32, either may be one value repeated) -> 16 results */
static inline AVX512_TARGET __m128i op16(const pn_qbinary* L, __m512i a, __m512i b) {
  __m512i v;
  if (L->op == PN_QADD) {
    v = _mm512_add_epi32(_mm512_set1_epi32(L->bias), _mm512_mullo_epi32(a, _mm512_set1_epi32(L->a_multiplier)));
    v = _mm512_add_epi32(v, _mm512_mullo_epi32(b, _mm512_set1_epi32(L->b_multiplier)));
    v = _mm512_sra_epi32(v, _mm_cvtsi32_si128(L->shift));
  } else {
    const __m512i p = _mm512_mullo_epi32(_mm512_sub_epi32(a, _mm512_set1_epi32(L->a_zero_point)),
                                         _mm512_sub_epi32(b, _mm512_set1_epi32(L->b_zero_point)));
    v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_cvtepi32_ps(p), _mm512_set1_ps(L->scale)));
  }
  v = _mm512_add_epi32(v, _mm512_set1_epi32(L->ozp));
  v = _mm512_min_epi32(_mm512_max_epi32(v, _mm512_set1_epi32(L->qmin)), _mm512_set1_epi32(L->qmax));
  return _mm512_cvtepi32_epi8(v);
}

static AVX512_TARGET void row_avx512(const pn_qbinary* L, const int8_t* a, int64_t sa, const int8_t* b,
                                     int64_t sb, int8_t* y, int64_t n) {
  const __m512i a1 = _mm512_set1_epi32(a[0]), b1 = _mm512_set1_epi32(b[0]);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 mask = n - i >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - i)) - 1);
    const __m512i av = sa ? _mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(mask, a + i)) : a1;
    const __m512i bv = sb ? _mm512_cvtepi8_epi32(_mm_maskz_loadu_epi8(mask, b + i)) : b1;
    _mm_mask_storeu_epi8(y + i, mask, op16(L, av, bv));
  }
}

static inline AVX2_TARGET __m128i op8(const pn_qbinary* L, __m256i a, __m256i b) {
  __m256i v;
  if (L->op == PN_QADD) {
    v = _mm256_add_epi32(_mm256_set1_epi32(L->bias), _mm256_mullo_epi32(a, _mm256_set1_epi32(L->a_multiplier)));
    v = _mm256_add_epi32(v, _mm256_mullo_epi32(b, _mm256_set1_epi32(L->b_multiplier)));
    v = _mm256_sra_epi32(v, _mm_cvtsi32_si128(L->shift));
  } else {
    const __m256i p = _mm256_mullo_epi32(_mm256_sub_epi32(a, _mm256_set1_epi32(L->a_zero_point)),
                                         _mm256_sub_epi32(b, _mm256_set1_epi32(L->b_zero_point)));
    v = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(L->scale)));
  }
  v = _mm256_add_epi32(v, _mm256_set1_epi32(L->ozp));
  v = _mm256_min_epi32(_mm256_max_epi32(v, _mm256_set1_epi32(L->qmin)), _mm256_set1_epi32(L->qmax));
  const __m128i v16 = _mm_packs_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  return _mm_packs_epi16(v16, v16);
}

static AVX2_TARGET void row_avx2(const pn_qbinary* L, const int8_t* a, int64_t sa, const int8_t* b, int64_t sb,
                                 int8_t* y, int64_t n) {
  const __m256i a1 = _mm256_set1_epi32(a[0]), b1 = _mm256_set1_epi32(b[0]);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i av = sa ? _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)(a + i))) : a1;
    const __m256i bv = sb ? _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i*)(b + i))) : b1;
    _mm_storel_epi64((__m128i*)(y + i), op8(L, av, bv));
  }
  row_portable(L, a + i * sa, sa, b + i * sb, sb, y + i, n - i); /* never reading past the operands */
}

#endif

static void row(const pn_qbinary* L, const int8_t* a, int64_t sa, const int8_t* b, int64_t sb, int8_t* y,
                int64_t n) {
#if defined(__x86_64__)
  if ((sa == 0 || sa == 1) && (sb == 0 || sb == 1)) {
    if (L->isa == PN_AVX512VNNI) return row_avx512(L, a, sa, b, sb, y, n);
    if (L->isa == PN_AVX2) return row_avx2(L, a, sa, b, sb, y, n);
  }
#endif
  row_portable(L, a, sa, b, sb, y, n);
}

pn_qbinary* pn_qbinary_make(int isa, int op, int ndim, const int64_t* geometry, int32_t a_param, int32_t b_param,
                            int32_t bias, int32_t shift, float scale, int32_t out_zero_point, int32_t qmin,
                            int32_t qmax) {
  if (ndim < 0 || ndim > DIMS || (op != PN_QADD && op != PN_QMUL) || (op == PN_QADD && (shift < 0 || shift > 31)))
    return NULL;
  pn_qbinary* L = calloc(1, sizeof(pn_qbinary));
  if (!L) return NULL;
#if defined(__x86_64__)
  L->isa = isa == PN_AVX512VNNI ? PN_AVX512VNNI : isa == PN_AVX2 ? PN_AVX2 : PN_PORTABLE;
#else
  (void)isa;
  L->isa = PN_PORTABLE;
#endif
  L->op = op;
  if (op == PN_QADD) L->a_multiplier = a_param, L->b_multiplier = b_param;
  else L->a_zero_point = a_param, L->b_zero_point = b_param;
  L->bias = bias, L->shift = shift, L->scale = scale, L->ozp = out_zero_point, L->qmin = qmin, L->qmax = qmax;
  /* dimensions of size 1 dropped, neighbours that both operands step through alike merged */
  int d = 0;
  L->total = 1;
  for (int i = 0; i < ndim; i++) {
    const int64_t size = geometry[i], sa = geometry[ndim + i], sb = geometry[2 * ndim + i];
    L->total *= size;
    if (size == 1) continue;
    if (d > 0 && L->a_stride[d - 1] == sa * size && L->b_stride[d - 1] == sb * size) {
      L->shape[d - 1] *= size;
      L->a_stride[d - 1] = sa, L->b_stride[d - 1] = sb;
      continue;
    }
    L->shape[d] = size, L->a_stride[d] = sa, L->b_stride[d] = sb;
    d++;
  }
  if (d == 0) L->shape[d++] = 1;
  L->ndim = d;
  return L;
}

void pn_qbinary_free(pn_qbinary* L) { free(L); }

int pn_qbinary_isa(const pn_qbinary* L) { return L->isa; }

typedef struct {
  const pn_qbinary* L;
  const int8_t *a, *b;
  int8_t* y;
  int64_t per; /* output elements per task, whole innermost rows or part of one */
} binary_args;

static void binary_task(void* ctx, int64_t task) {
  const binary_args* t = ctx;
  const pn_qbinary* L = t->L;
  const int last = L->ndim - 1;
  const int64_t inner = L->shape[last];
  int64_t start = task * t->per, end = start + t->per < L->total ? start + t->per : L->total;
  while (start < end) {
    /* the operands' offsets of output element `start` */
    int64_t rest = start, oa = 0, ob = 0;
    for (int i = last; i >= 0; i--) {
      const int64_t at = rest % L->shape[i];
      rest /= L->shape[i];
      oa += at * L->a_stride[i];
      ob += at * L->b_stride[i];
    }
    const int64_t in_row = start % inner;
    const int64_t n = inner - in_row < end - start ? inner - in_row : end - start;
    row(L, t->a + oa, L->a_stride[last], t->b + ob, L->b_stride[last], t->y + start, n);
    start += n;
  }
}

void pn_qbinary_run(const pn_qbinary* L, const int8_t* a, const int8_t* b, int8_t* y, int threads) {
  if (L->total <= 0) return;
  /* tasks of 2^15 outputs at least: a worker's wake-up is worth no less */
  int64_t per = L->total;
  if (threads > 1 && L->total >= (INT64_C(1) << 16)) {
    per = (L->total + 4 * threads - 1) / (4 * threads);
    if (per < (INT64_C(1) << 15)) per = INT64_C(1) << 15;
  }
  binary_args t = {L, a, b, y, per};
  pn_parallel(binary_task, &t, (L->total + per - 1) / per, threads);
}
