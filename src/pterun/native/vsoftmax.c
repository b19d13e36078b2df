/* XNNPACK's float softmax (operators/softmax-nc.c, xnn_compute_floating_point_softmax) per row of `cols`:
 *
 *   1. m = the row's maximum (f32-rmax: avx512f_u64_acc4 / avx_u32_acc4, from -inf);
 *   2. e_i = exp(x_i - m), stored, and s = their sum (f32-raddstoreexpminusmax: avx512f_rr2_p5_u64_acc2 /
 *      avx2_rr2_p5_u32_acc2): exp as 2^n times a degree-5 polynomial, 0 below the denormal cutoff; the sum in
 *      two vector accumulators over blocks of four vectors (vectors 0 and 2 into the first, 1 and 3 into the
 *      second), the two added, then the remaining whole vectors and the masked rest into it, and its lanes
 *      added in halves down to one, in the operand order below;
 *   3. y_i = e_i * (1 / s) (compute_reciprocal_f32, then f32-vmulc).
 *
 * The maximum's value is the same in any order; which NaN it keeps is vmaxps's operand order, which compilers
 * keep as written. The sum's order is XNNPACK's, lane for lane, and so are the NaNs it ends with (below). Rows
 * are independent: they are split over threads as XNNPACK splits them.
 */
#include <math.h>

#include "native.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f")))
#define AVX2 __attribute__((target("avx2,fma")))
#define AVX __attribute__((target("avx"))) /* the helpers both widths inline */

/* An add or a multiply of two NaNs returns its first source's NaN on x86, and compilers take + and * as
 * commutative, so the order written in C does not decide which NaN a row ends with. The rows below pin, in asm,
 * the order ExecuTorch 1.5.1's XNNPACK build runs each of them in (read from its machine code):
 *   - in the main loop each exponent comes before the accumulator for vectors 0 and 1, after it for 2 and 3;
 *     then the accumulators in order, each later vector after the accumulator;
 *   - the horizontal sum: AVX-512 adds the high half to the low one down to four lanes, AVX2 the low to the high
 *     at eight; then lanes 2 and 3 before lanes 0 and 1, then lane 0 before lane 1;
 *   - vmulc: avx512f_u32 takes the scale first; avx_u16 takes y first in its blocks of 16 floats and the scale
 *     first in its block of 8 and in its tail.
 * So a row holding an infinity and a NaN ends with ExecuTorch's NaN. */
#define PINNED(name, attr, type, insn)                                  \
  static inline attr type name(type first, type second) {              \
    type r;                                                            \
    __asm__(insn " %2, %1, %0" : "=v"(r) : "v"(first), "v"(second)); \
    return r;                                                          \
  }
PINNED(add_512, AVX512, __m512, "vaddps")
PINNED(mul_512, AVX512, __m512, "vmulps")
PINNED(add_256_512, AVX512, __m256, "vaddps")
PINNED(add_256, AVX2, __m256, "vaddps")
PINNED(mul_256, AVX2, __m256, "vmulps")
PINNED(add_128, AVX, __m128, "vaddps")
PINNED(add_ss, AVX, __m128, "vaddss")

static inline AVX512 __m512 expminus_512(__m512 vi, __m512 vi_max) {
  const __m512 vmagic_bias = _mm512_set1_ps(0x1.8000FEp23f);
  const __m512 vx = _mm512_sub_ps(vi, vi_max);
  __m512 vn = _mm512_fmadd_ps(vx, _mm512_set1_ps(0x1.715476p+0f), vmagic_bias);
  const __m512 vs = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_castps_si512(vn), 23));
  vn = _mm512_sub_ps(vn, vmagic_bias);
  __m512 vt = _mm512_fmadd_ps(vn, _mm512_set1_ps(-0x1.62E400p-1f), vx);
  vt = _mm512_fmadd_ps(vn, _mm512_set1_ps(-0x1.7F7D1Cp-20f), vt);
  __m512 vp = _mm512_fmadd_ps(_mm512_set1_ps(0x1.0F9F9Cp-7f), vt, _mm512_set1_ps(0x1.573A1Ap-5f));
  vp = _mm512_fmadd_ps(vp, vt, _mm512_set1_ps(0x1.555A80p-3f));
  vp = _mm512_fmadd_ps(vp, vt, _mm512_set1_ps(0x1.FFFDC6p-2f));
  vp = _mm512_fmadd_ps(vp, vt, _mm512_set1_ps(0x1.FFFFF6p-1f));
  vt = _mm512_mul_ps(vt, vs);
  const __m512 vf = _mm512_fmadd_ps(vt, vp, vs);
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(vx, _mm512_set1_ps(-0x1.5D589Ep6f), _CMP_LT_OS), vf,
                              _mm512_setzero_ps());
}

static AVX512 void row_512(const float* x, float* y, int64_t n) {
  /* 1. */
  __m512 m0 = _mm512_set1_ps(-INFINITY), m1 = m0, m2 = m0, m3 = m0;
  const float* p = x;
  int64_t left = n;
  for (; left >= 64; left -= 64, p += 64) {
    m0 = _mm512_max_ps(m0, _mm512_loadu_ps(p));
    m1 = _mm512_max_ps(m1, _mm512_loadu_ps(p + 16));
    m2 = _mm512_max_ps(m2, _mm512_loadu_ps(p + 32));
    m3 = _mm512_max_ps(m3, _mm512_loadu_ps(p + 48));
  }
  m0 = _mm512_max_ps(_mm512_max_ps(m0, m1), _mm512_max_ps(m2, m3));
  for (; left >= 16; left -= 16, p += 16) m0 = _mm512_max_ps(m0, _mm512_loadu_ps(p));
  for (; left > 0; left--, p++) m0 = _mm512_max_ps(m0, _mm512_set1_ps(*p));
  const __m512 vi_max = _mm512_set1_ps(_mm512_reduce_max_ps(m0));
  /* 2. */
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  p = x;
  float* q = y;
  left = n;
  for (; left >= 64; left -= 64, p += 64, q += 64) {
    const __m512 f0 = expminus_512(_mm512_loadu_ps(p), vi_max);
    const __m512 f1 = expminus_512(_mm512_loadu_ps(p + 16), vi_max);
    const __m512 f2 = expminus_512(_mm512_loadu_ps(p + 32), vi_max);
    const __m512 f3 = expminus_512(_mm512_loadu_ps(p + 48), vi_max);
    _mm512_storeu_ps(q, f0);
    _mm512_storeu_ps(q + 16, f1);
    _mm512_storeu_ps(q + 32, f2);
    _mm512_storeu_ps(q + 48, f3);
    acc0 = add_512(f0, acc0);
    acc1 = add_512(f1, acc1);
    acc0 = add_512(acc0, f2);
    acc1 = add_512(acc1, f3);
  }
  __m512 acc = add_512(acc0, acc1);
  for (; left >= 16; left -= 16, p += 16, q += 16) {
    const __m512 f = expminus_512(_mm512_loadu_ps(p), vi_max);
    _mm512_storeu_ps(q, f);
    acc = add_512(acc, f);
  }
  if (left > 0) {
    const __mmask16 mask = (__mmask16)((1u << left) - 1u);
    const __m512 f = expminus_512(_mm512_maskz_loadu_ps(mask, p), vi_max);
    _mm512_mask_storeu_ps(q, mask, f);
    acc = add_512(acc, _mm512_maskz_mov_ps(mask, f)); /* acc is never -0: its lanes out of the row keep their bits */
  }
  const __m256 h = add_256_512(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1)),
                               _mm512_castps512_ps256(acc));
  __m128 s = add_128(_mm256_extractf128_ps(h, 1), _mm256_castps256_ps128(h));
  s = add_128(_mm_movehl_ps(s, s), s);
  s = add_ss(s, _mm_movehdup_ps(s));
  /* 3. */
  const __m512 scale = _mm512_set1_ps(1.0f / _mm_cvtss_f32(s));
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, mul_512(scale, _mm512_loadu_ps(y + i)));
  if (i < n) {
    const __mmask16 mask = (__mmask16)((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(y + i, mask, mul_512(scale, _mm512_maskz_loadu_ps(mask, y + i)));
  }
}

static inline AVX2 __m256 expminus_256(__m256 vi, __m256 vi_max) {
  const __m256 vmagic_bias = _mm256_set1_ps(0x1.8000FEp23f);
  const __m256 vx = _mm256_sub_ps(vi, vi_max);
  __m256 vn = _mm256_fmadd_ps(vx, _mm256_set1_ps(0x1.715476p+0f), vmagic_bias);
  const __m256 vs = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(vn), 23));
  vn = _mm256_sub_ps(vn, vmagic_bias);
  __m256 vt = _mm256_fmadd_ps(vn, _mm256_set1_ps(-0x1.62E400p-1f), vx);
  vt = _mm256_fmadd_ps(vn, _mm256_set1_ps(-0x1.7F7D1Cp-20f), vt);
  __m256 vp = _mm256_fmadd_ps(_mm256_set1_ps(0x1.0F9F9Cp-7f), vt, _mm256_set1_ps(0x1.573A1Ap-5f));
  vp = _mm256_fmadd_ps(vp, vt, _mm256_set1_ps(0x1.555A80p-3f));
  vp = _mm256_fmadd_ps(vp, vt, _mm256_set1_ps(0x1.FFFDC6p-2f));
  vp = _mm256_fmadd_ps(vp, vt, _mm256_set1_ps(0x1.FFFFF6p-1f));
  vt = _mm256_mul_ps(vt, vs);
  const __m256 vf = _mm256_fmadd_ps(vt, vp, vs);
  return _mm256_andnot_ps(_mm256_cmp_ps(vx, _mm256_set1_ps(-0x1.5D589Ep6f), _CMP_LT_OS), vf);
}

static const int32_t tail_mask[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

static AVX2 void row_256(const float* x, float* y, int64_t n) {
  /* 1. */
  __m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0, m2 = m0, m3 = m0;
  const float* p = x;
  int64_t left = n;
  for (; left >= 32; left -= 32, p += 32) {
    m0 = _mm256_max_ps(m0, _mm256_loadu_ps(p));
    m1 = _mm256_max_ps(m1, _mm256_loadu_ps(p + 8));
    m2 = _mm256_max_ps(m2, _mm256_loadu_ps(p + 16));
    m3 = _mm256_max_ps(m3, _mm256_loadu_ps(p + 24));
  }
  m0 = _mm256_max_ps(_mm256_max_ps(m0, m1), _mm256_max_ps(m2, m3));
  for (; left >= 8; left -= 8, p += 8) m0 = _mm256_max_ps(m0, _mm256_loadu_ps(p));
  for (; left > 0; left--, p++) m0 = _mm256_max_ps(m0, _mm256_set1_ps(*p));
  __m128 mx = _mm_max_ps(_mm256_castps256_ps128(m0), _mm256_extractf128_ps(m0, 1));
  mx = _mm_max_ps(mx, _mm_movehl_ps(mx, mx));
  mx = _mm_max_ss(mx, _mm_movehdup_ps(mx));
  const __m256 vi_max = _mm256_set1_ps(_mm_cvtss_f32(mx));
  /* 2. */
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  p = x;
  float* q = y;
  left = n;
  for (; left >= 32; left -= 32, p += 32, q += 32) {
    const __m256 f0 = expminus_256(_mm256_loadu_ps(p), vi_max);
    const __m256 f1 = expminus_256(_mm256_loadu_ps(p + 8), vi_max);
    const __m256 f2 = expminus_256(_mm256_loadu_ps(p + 16), vi_max);
    const __m256 f3 = expminus_256(_mm256_loadu_ps(p + 24), vi_max);
    _mm256_storeu_ps(q, f0);
    _mm256_storeu_ps(q + 8, f1);
    _mm256_storeu_ps(q + 16, f2);
    _mm256_storeu_ps(q + 24, f3);
    acc0 = add_256(f0, acc0);
    acc1 = add_256(f1, acc1);
    acc0 = add_256(acc0, f2);
    acc1 = add_256(acc1, f3);
  }
  __m256 acc = add_256(acc0, acc1);
  for (; left >= 8; left -= 8, p += 8, q += 8) {
    const __m256 f = expminus_256(_mm256_loadu_ps(p), vi_max);
    _mm256_storeu_ps(q, f);
    acc = add_256(acc, f);
  }
  if (left > 0) {
    const __m256i mask = _mm256_loadu_si256((const __m256i*)(tail_mask + 8 - left));
    const __m256 f = expminus_256(_mm256_maskload_ps(p, mask), vi_max);
    _mm256_maskstore_ps(q, mask, f);
    acc = add_256(acc, _mm256_and_ps(f, _mm256_castsi256_ps(mask)));
  }
  __m128 s = add_128(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  s = add_128(_mm_movehl_ps(s, s), s);
  s = add_ss(s, _mm_movehdup_ps(s));
  /* 3. */
  const __m256 scale = _mm256_set1_ps(1.0f / _mm_cvtss_f32(s));
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_ps(y + i, mul_256(_mm256_loadu_ps(y + i), scale));
    _mm256_storeu_ps(y + i + 8, mul_256(_mm256_loadu_ps(y + i + 8), scale));
  }
  if (i + 8 <= n) {
    _mm256_storeu_ps(y + i, mul_256(scale, _mm256_loadu_ps(y + i)));
    i += 8;
  }
  if (i < n) {
    const __m256i mask = _mm256_loadu_si256((const __m256i*)(tail_mask + 8 - (n - i)));
    _mm256_maskstore_ps(y + i, mask, mul_256(scale, _mm256_maskload_ps(y + i, mask)));
  }
}

typedef void (*row_fn)(const float* x, float* y, int64_t n);
static const row_fn rows_by_family[2] = {row_512, row_256};

#else

typedef void (*row_fn)(const float* x, float* y, int64_t n);
static const row_fn rows_by_family[2] = {0, 0};

#endif

struct softmax_job {
  row_fn row;
  const float* x;
  float* y;
  int64_t cols;
};

static void softmax_row(void* ctx, int64_t r) {
  const unsigned fpu = pn_denormals_off();
  const struct softmax_job* job = ctx;
  job->row(job->x + r * job->cols, job->y + r * job->cols, job->cols);
  pn_denormals_restore(fpu);
}

int pn_softmax(int family, const float* x, float* y, int64_t rows, int64_t cols, int threads) {
  if (family < 0 || family > 1 || !pn_vfamily_runs(family) || cols <= 0) return -1;
  struct softmax_job job = {rows_by_family[family], x, y, cols};
  if (rows > 0) pn_parallel(softmax_row, &job, rows, threads);
  return 0;
}
