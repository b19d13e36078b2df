/* XNNPACK's float elementwise kernels (f32-vsigmoid, f32-vrsqrt, f32-vsqrt, f32-vsin, f32-vcos, f32-vexp,
 * f32-vtanh, f32-vgelu, f32-vlog, f32-vhswish, f32-velu), in the arithmetic of the kernel its runtime picks on
 * each x86-64 family (unary-elementwise-config.c without XNN_FLAG_SLOW_CONSISTENT_ARITHMETIC, as ExecuTorch
 * creates its runtimes):
 *
 *   op          avx512f family (AVX-512F)                   avx2 family (AVX2 and FMA3, no AVX-512F)
 *   sigmoid     avx512f_rr2_lut32_p2_perm2_scalef_div       avx2_rr1_p5_div
 *   rsqrt       avx512f_rsqrt: rsqrt14 + 1 Newton step      avx_rsqrt: rsqrtps + 1 Newton step
 *   sqrt        avx512f_rsqrt: x rsqrt(x), same steps       avx_rsqrt
 *   log         avx512f_rational_3_3_div (getexp)           fma3_rational_3_3_div (exponent bits)
 *   elu         avx512f_rr1_p6                              avx2_rr1_lut4_p4_perm
 *   sin, cos, exp, tanh, gelu, hardswish: XNNPACK's one kernel per op over its SIMD wrappers (vlanes.h), the
 *               same arithmetic at both widths
 *
 * Each is the same steps lane for lane (x86's min and max, the same constants, fused multiply-adds where
 * XNNPACK fuses), so outputs are XNNPACK's bit for bit; where XNNPACK starts from a hardware estimate (rsqrt14,
 * rsqrtps) the same instruction gives the same estimate on the same CPU. A family's kernels use its own
 * instructions, so they run only on CPUs that have them (pn_vfamily_runs).
 */
#include <math.h>
#include <string.h>

#include "native.h"

#if defined(__x86_64__)
#include <immintrin.h>

#define AVX512 __attribute__((target("avx512f")))
#define AVX2 __attribute__((target("avx2,fma")))

/* -- the avx512f family ------------------------------------------------------------------------------------ */

#define V __m512
#define LANES 16
#define SFX(name) name##_512
#define PN_ATTR AVX512
#define v_set1 _mm512_set1_ps
#define v_set1i _mm512_set1_epi32
#define v_cast _mm512_castsi512_ps
#define v_add _mm512_add_ps
#define v_sub _mm512_sub_ps
#define v_mul _mm512_mul_ps
#define v_div _mm512_div_ps
#define v_fmadd _mm512_fmadd_ps
#define v_fnmadd _mm512_fnmadd_ps
#define v_min _mm512_min_ps
#define v_max _mm512_max_ps
#define v_round(a) _mm512_roundscale_ps((a), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define v_and(a, b) _mm512_castsi512_ps(_mm512_and_epi32(_mm512_castps_si512(a), _mm512_castps_si512(b)))
#define v_or(a, b) _mm512_castsi512_ps(_mm512_or_epi32(_mm512_castps_si512(a), _mm512_castps_si512(b)))
#define v_sll23(a) _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_castps_si512(a), 23))
#define v_loadu _mm512_loadu_ps
#define v_storeu _mm512_storeu_ps
#include "vlanes.h"

/* 2^(k/32), k = 0..31 */
static const float exp2_k_over_32[32] __attribute__((aligned(64))) = {
    0x1.000000p+0f, 0x1.059B0Ep+0f, 0x1.0B5586p+0f, 0x1.11301Ep+0f, 0x1.172B84p+0f, 0x1.1D4874p+0f,
    0x1.2387A6p+0f, 0x1.29E9E0p+0f, 0x1.306FE0p+0f, 0x1.371A74p+0f, 0x1.3DEA64p+0f, 0x1.44E086p+0f,
    0x1.4BFDAEp+0f, 0x1.5342B6p+0f, 0x1.5AB07Ep+0f, 0x1.6247ECp+0f, 0x1.6A09E6p+0f, 0x1.71F75Ep+0f,
    0x1.7A1148p+0f, 0x1.82589Ap+0f, 0x1.8ACE54p+0f, 0x1.93737Cp+0f, 0x1.9C4918p+0f, 0x1.A5503Cp+0f,
    0x1.AE89FAp+0f, 0x1.B7F770p+0f, 0x1.C199BEp+0f, 0x1.CB720Ep+0f, 0x1.D5818Ep+0f, 0x1.DFC974p+0f,
    0x1.EA4AFAp+0f, 0x1.F50766p+0f,
};

/* sigmoid(-|x|) = e / (e + 1), e = exp(-|x|) from a 32-entry table of 2^(k/32), a degree-2 polynomial and
 * scalef; 1 - that for x with a clear sign bit. */
static inline AVX512 __m512 sigmoid_512(__m512 vx, const float* unused) {
  (void)unused;
  const __m512i vsign_mask = _mm512_set1_epi32((int)0x80000000u);
  const __m512 vmagic_bias = _mm512_set1_ps(0x1.800000p18f);
  const __m512 vone = _mm512_set1_ps(1.0f);
  const __m512 vtable_lo = _mm512_load_ps(exp2_k_over_32), vtable_hi = _mm512_load_ps(exp2_k_over_32 + 16);
  const __m512 vz = _mm512_castsi512_ps(_mm512_or_epi32(_mm512_castps_si512(vx), vsign_mask));
  __m512 vn = _mm512_fmadd_ps(vz, _mm512_set1_ps(0x1.715476p0f), vmagic_bias);
  const __m512 vl = _mm512_permutex2var_ps(vtable_lo, _mm512_castps_si512(vn), vtable_hi);
  vn = _mm512_sub_ps(vn, vmagic_bias);
  __m512 vt = _mm512_fmadd_ps(vn, _mm512_set1_ps(-0x1.62E430p-1f), vz);
  vt = _mm512_fmadd_ps(vn, _mm512_set1_ps(0x1.05C61p-29f), vt);
  __m512 vp = _mm512_fmadd_ps(vt, _mm512_set1_ps(0x1.000000p-1f), _mm512_set1_ps(0x1.0000F6p-0f));
  vt = _mm512_mul_ps(vt, vl);
  vp = _mm512_fmadd_ps(vt, vp, vl);
  const __m512 ve = _mm512_scalef_ps(vp, vn);
  const __m512 vf = _mm512_div_ps(ve, _mm512_add_ps(ve, vone));
  return _mm512_mask_sub_ps(vf, _mm512_testn_epi32_mask(_mm512_castps_si512(vx), vsign_mask), vone, vf);
}

/* One Newton step from the estimate y: y - (x y^2 - 1) (y / 2), unfactored as XNNPACK writes it. */
static inline AVX512 __m512 newton_512(__m512 vx, __m512 vy) {
  const __m512 vt3 = _mm512_sub_ps(_mm512_mul_ps(vx, _mm512_mul_ps(vy, vy)), _mm512_set1_ps(1.0f));
  return _mm512_sub_ps(vy, _mm512_mul_ps(vt3, _mm512_mul_ps(_mm512_set1_ps(0.5f), vy)));
}

/* rsqrt: 0 for +inf (0 gives NaN: inf times 0 in the Newton step). */
static inline AVX512 __m512 rsqrt_512(__m512 vx, const float* unused) {
  (void)unused;
  const __m512 vy = newton_512(vx, _mm512_rsqrt14_ps(vx));
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(_mm512_set1_ps(INFINITY), vx, _CMP_EQ_OQ), vy,
                              _mm512_setzero_ps());
}

/* sqrt: x rsqrt(x), the estimate zeroed where x == 0. */
static inline AVX512 __m512 sqrt_512(__m512 vx, const float* unused) {
  (void)unused;
  const __mmask16 nonzero = _mm512_cmp_ps_mask(vx, _mm512_setzero_ps(), _CMP_NEQ_OQ);
  const __m512 vy = newton_512(vx, _mm512_rsqrt14_ps(vx));
  return _mm512_mul_ps(vx, _mm512_maskz_mov_ps(nonzero, vy));
}

/* getexp, with -inf for zeros and a NaN for negative inputs. */
static inline AVX512 __m512 log_512(__m512 vx, const float* unused) {
  (void)unused;
  vx = _mm512_mul_ps(vx, _mm512_set1_ps(1.4142134190e+00));
  const __mmask16 zero = _mm512_cmp_ps_mask(vx, _mm512_setzero_ps(), _CMP_EQ_OQ);
  const __mmask16 negative = _mm512_cmp_ps_mask(vx, _mm512_setzero_ps(), _CMP_LT_OQ);
  __m512i e = _mm512_castps_si512(_mm512_getexp_ps(vx));
  e = _mm512_mask_set1_epi32(e, zero, (int)0xFF800000u);
  e = _mm512_mask_set1_epi32(e, negative, 0x7FC00001);
  return log_rest_512(vx, _mm512_castsi512_ps(e));
}

/* elu (params: prescale, alpha, beta; XNNPACK's are 1, alpha, 1, and multiplying by 1 is no no-op with
 * denormals off: the parameters arrive at run time, as XNNPACK's do, so the compiler cannot drop the products):
 * alpha (exp(z) - 1) for z = max(prescale x, -17.33) below 0, exp(z) as 2^n times a degree-6 polynomial;
 * beta x elsewhere (NaN included). */
static inline AVX512 __m512 elu_512(__m512 vx, const float* params) {
  const __m512 valpha = _mm512_set1_ps(params[1]);
  const __m512 vmagic_bias = _mm512_set1_ps(0x1.8000FEp23f);
  const __m512 vz = _mm512_max_ps(_mm512_set1_ps(-0x1.154246p+4f), _mm512_mul_ps(vx, _mm512_set1_ps(params[0])));
  const __mmask16 vsign = _mm512_cmp_ps_mask(vx, _mm512_setzero_ps(), _CMP_NLT_US);
  __m512 vn = _mm512_fmadd_ps(vz, _mm512_set1_ps(0x1.715476p+0f), vmagic_bias);
  __m512 vs = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_castps_si512(vn), 23));
  vn = _mm512_sub_ps(vn, vmagic_bias);
  __m512 vt = _mm512_fmadd_ps(vn, _mm512_set1_ps(-0x1.62E430p-1f), vz);
  __m512 vp = _mm512_fmadd_ps(_mm512_set1_ps(0x1.6B7338p-10f), vt, _mm512_set1_ps(0x1.12278Ep-7f));
  vp = _mm512_fmadd_ps(vp, vt, _mm512_set1_ps(0x1.555716p-5f));
  vp = _mm512_fmadd_ps(vp, vt, _mm512_set1_ps(0x1.5554B0p-3f));
  vp = _mm512_fmadd_ps(vp, vt, _mm512_set1_ps(0x1.FFFFFEp-2f));
  vp = _mm512_mul_ps(vp, vt);
  vt = _mm512_mul_ps(vt, vs);
  vs = _mm512_fmsub_ps(vs, valpha, valpha);
  vp = _mm512_fmadd_ps(vp, vt, vt);
  const __m512 vy = _mm512_fmadd_ps(vp, valpha, vs);
  return _mm512_mask_mul_ps(vy, vsign, vx, _mm512_set1_ps(params[2]));
}

PN_MAP(sigmoid)
PN_MAP(rsqrt)
PN_MAP(sqrt)
PN_MAP(log)
PN_MAP(elu)

#undef V
#undef LANES
#undef SFX
#undef PN_ATTR
#undef v_set1
#undef v_set1i
#undef v_cast
#undef v_add
#undef v_sub
#undef v_mul
#undef v_div
#undef v_fmadd
#undef v_fnmadd
#undef v_min
#undef v_max
#undef v_round
#undef v_and
#undef v_or
#undef v_sll23
#undef v_loadu
#undef v_storeu
#undef PN_MAP

/* -- the avx2 family --------------------------------------------------------------------------------------- */

#define V __m256
#define LANES 8
#define SFX(name) name##_256
#define PN_ATTR AVX2
#define v_set1 _mm256_set1_ps
#define v_set1i _mm256_set1_epi32
#define v_cast _mm256_castsi256_ps
#define v_add _mm256_add_ps
#define v_sub _mm256_sub_ps
#define v_mul _mm256_mul_ps
#define v_div _mm256_div_ps
#define v_fmadd _mm256_fmadd_ps
#define v_fnmadd _mm256_fnmadd_ps
#define v_min _mm256_min_ps
#define v_max _mm256_max_ps
#define v_round(a) _mm256_round_ps((a), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define v_and _mm256_and_ps
#define v_or _mm256_or_ps
#define v_sll23(a) _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(a), 23))
#define v_loadu _mm256_loadu_ps
#define v_storeu _mm256_storeu_ps
#include "vlanes.h"

/* sigmoid(-|x|) = e / (e + 1), e = exp(-|x|) as 2^n times a degree-5 polynomial, 0 below the denormal
 * cutoff; 1 - that for x with a clear sign bit. */
static inline AVX2 __m256 sigmoid_256(__m256 vx, const float* unused) {
  (void)unused;
  const __m256 vmagic_bias = _mm256_set1_ps(0x1.8000FEp23f);
  const __m256 vone = _mm256_set1_ps(1.0f);
  const __m256 vz = _mm256_or_ps(vx, _mm256_set1_ps(-0.0f));
  __m256 vn = _mm256_fmadd_ps(vz, _mm256_set1_ps(0x1.715476p0f), vmagic_bias);
  const __m256 vs = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_castps_si256(vn), 23));
  vn = _mm256_sub_ps(vn, vmagic_bias);
  __m256 vt = _mm256_fmadd_ps(vn, _mm256_set1_ps(-0x1.62E430p-1f), vz);
  __m256 vp = _mm256_fmadd_ps(_mm256_set1_ps(0x1.0F9F9Cp-7f), vt, _mm256_set1_ps(0x1.573A1Ap-5f));
  vp = _mm256_fmadd_ps(vp, vt, _mm256_set1_ps(0x1.555A80p-3f));
  vp = _mm256_fmadd_ps(vp, vt, _mm256_set1_ps(0x1.FFFDC6p-2f));
  vp = _mm256_fmadd_ps(vp, vt, _mm256_set1_ps(0x1.FFFFF6p-1f));
  vt = _mm256_mul_ps(vt, vs);
  const __m256 ve = _mm256_fmadd_ps(vt, vp, vs);
  __m256 vf = _mm256_div_ps(ve, _mm256_add_ps(ve, vone));
  vf = _mm256_andnot_ps(_mm256_cmp_ps(vz, _mm256_set1_ps(-0x1.5D589Ep+6f), _CMP_LT_OS), vf);
  return _mm256_blendv_ps(_mm256_sub_ps(vone, vf), vf, vx);
}

static inline AVX2 __m256 newton_256(__m256 vx, __m256 vy) {
  const __m256 vt3 = _mm256_sub_ps(_mm256_mul_ps(vx, _mm256_mul_ps(vy, vy)), _mm256_set1_ps(1.0f));
  return _mm256_sub_ps(vy, _mm256_mul_ps(vt3, _mm256_mul_ps(_mm256_set1_ps(0.5f), vy)));
}

static inline AVX2 __m256 rsqrt_256(__m256 vx, const float* unused) {
  (void)unused;
  const __m256 vy = newton_256(vx, _mm256_rsqrt_ps(vx));
  return _mm256_andnot_ps(_mm256_cmp_ps(_mm256_set1_ps(INFINITY), vx, _CMP_EQ_OQ), vy);
}

static inline AVX2 __m256 sqrt_256(__m256 vx, const float* unused) {
  (void)unused;
  const __m256 nonzero = _mm256_cmp_ps(vx, _mm256_setzero_ps(), _CMP_NEQ_OQ);
  const __m256 vy = newton_256(vx, _mm256_rsqrt_ps(vx));
  return _mm256_mul_ps(vx, _mm256_and_ps(nonzero, vy));
}

/* The exponent from the bits: (sign and exponent >> 8, arithmetic) | 256.0f, minus 383 (-inf for zeros, a NaN
 * for negative inputs). */
static inline AVX2 __m256 log_256(__m256 vx, const float* unused) {
  (void)unused;
  vx = _mm256_mul_ps(vx, _mm256_set1_ps(1.4142134190e+00));
  const __m256 a = _mm256_or_ps(_mm256_and_ps(_mm256_cmp_ps(vx, _mm256_setzero_ps(), _CMP_EQ_OQ),
                                              _mm256_set1_ps(-0.0f)), vx);
  const __m256 bits = _mm256_and_ps(a, _mm256_castsi256_ps(_mm256_set1_epi32((int)0xff800000u)));
  const __m256 e = _mm256_castsi256_ps(_mm256_srai_epi32(_mm256_castps_si256(bits), 8));
  const __m256 vexp = _mm256_sub_ps(_mm256_or_ps(_mm256_set1_ps(256.0f), e), _mm256_set1_ps(383.0f));
  return log_rest_256(vx, vexp);
}

/* 2^(-k/8) k = 0..3 as the entries' bits less k << 21, twice (permutevar picks within 128-bit halves). */
static const float elu_table[8] __attribute__((aligned(32))) = {
    0x1.000000p+0f, 0x1.F06FE0p-1f, 0x1.EA09E6p-1f, 0x1.EE89FAp-1f,
    0x1.000000p+0f, 0x1.F06FE0p-1f, 0x1.EA09E6p-1f, 0x1.EE89FAp-1f,
};

/* elu: exp(z) as a 4-entry table times 2^n and a degree-4 polynomial. */
static inline AVX2 __m256 elu_256(__m256 vx, const float* params) {
  const __m256 valpha = _mm256_set1_ps(params[1]);
  const __m256 vmagic_bias = _mm256_set1_ps(0x1.800000p21f);
  const __m256 vz = _mm256_max_ps(_mm256_set1_ps(-0x1.154246p+4f), _mm256_mul_ps(vx, _mm256_set1_ps(params[0])));
  __m256 vn = _mm256_fmadd_ps(vz, _mm256_set1_ps(0x1.715476p+0f), vmagic_bias);
  const __m256i ven = _mm256_slli_epi32(_mm256_castps_si256(vn), 21);
  const __m256i vl = _mm256_castps_si256(_mm256_permutevar_ps(_mm256_load_ps(elu_table), _mm256_castps_si256(vn)));
  __m256 vs = _mm256_castsi256_ps(_mm256_add_epi32(vl, ven));
  vn = _mm256_sub_ps(vn, vmagic_bias);
  __m256 vt = _mm256_fmadd_ps(vn, _mm256_set1_ps(-0x1.62E430p-1f), vz);
  __m256 vp = _mm256_fmadd_ps(_mm256_set1_ps(0x1.554F9Ap-5f), vt, _mm256_set1_ps(0x1.557082p-3f));
  vp = _mm256_fmadd_ps(vp, vt, _mm256_set1_ps(0x1.000002p-1f));
  vp = _mm256_mul_ps(vp, vt);
  vt = _mm256_mul_ps(vt, vs);
  vs = _mm256_fmsub_ps(vs, valpha, valpha);
  vp = _mm256_fmadd_ps(vp, vt, vt);
  const __m256 ve = _mm256_fmadd_ps(vp, valpha, vs);
  vx = _mm256_mul_ps(vx, _mm256_set1_ps(params[2]));
  return _mm256_blendv_ps(vx, ve, vx);
}

PN_MAP(sigmoid)
PN_MAP(rsqrt)
PN_MAP(sqrt)
PN_MAP(log)
PN_MAP(elu)

typedef void (*map_fn)(const float* x, float* y, int64_t n, const float* params);

/* By family, then op (native.h's pn_vop order). */
static const map_fn kernels[2][PN_VOP_COUNT] = {
    {map_sigmoid_512, map_rsqrt_512, map_sqrt_512, map_sin_512, map_cos_512, map_exp_512, map_tanh_512,
     map_gelu_512, map_log_512, map_hardswish_512, map_elu_512},
    {map_sigmoid_256, map_rsqrt_256, map_sqrt_256, map_sin_256, map_cos_256, map_exp_256, map_tanh_256,
     map_gelu_256, map_log_256, map_hardswish_256, map_elu_256},
};

int pn_vfamily_runs(int family) {
  __builtin_cpu_init();
  if (family == PN_VFAMILY_AVX512F) return __builtin_cpu_supports("avx512f");
  if (family == PN_VFAMILY_AVX2) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return 0;
}

#else

typedef void (*map_fn)(const float* x, float* y, int64_t n, const float* params);
static const map_fn kernels[2][PN_VOP_COUNT] = {{0}};

int pn_vfamily_runs(int family) {
  (void)family;
  return 0;
}

#endif

/* Work split in chunks of whole vectors of either width. */
#define CHUNK 16384

struct vunary_job {
  map_fn fn;
  const float* x;
  float* y;
  int64_t n;
  float params[3];
};

static void vunary_chunk(void* ctx, int64_t index) {
  const unsigned fpu = pn_denormals_off();
  const struct vunary_job* job = ctx;
  const int64_t start = index * CHUNK;
  const int64_t n = job->n - start < CHUNK ? job->n - start : CHUNK;
  job->fn(job->x + start, job->y + start, n, job->params);
  pn_denormals_restore(fpu);
}

int pn_vunary(int op, int family, const float* x, float* y, int64_t n, float param, int threads) {
  if (op < 0 || op >= PN_VOP_COUNT || family < 0 || family > 1 || !pn_vfamily_runs(family)) return -1;
  struct vunary_job job = {kernels[family][op], x, y, n, {1.0f, param, 1.0f}};
  if (n > 0) pn_parallel(vunary_chunk, &job, (n + CHUNK - 1) / CHUNK, threads);
  return 0;
}
