/* The float kernels XNNPACK writes once over its SIMD wrappers (src/xnnpack/simd/f32-*.h) and builds for both
 * AVX-512F and FMA3: the same operations lane for lane at either width, so their results do not depend on the
 * width. vunary.c includes this file once per width, after defining
 *
 *   V, VI         the float and integer vector types
 *   LANES         their lanes
 *   SFX(name)     the name of the width's copy of a function
 *   PN_ATTR       the target attribute of the width's functions
 *   v_*           one instruction each (operand order as XNNPACK's: x86's min/max return the second operand
 *                 where either is NaN)
 *
 * Constants are written as XNNPACK writes them (a literal without the f suffix is a double rounded to float).
 */

/* f32-vsin rational_5_4_div: reduction to [-pi, pi] by multiples of 2 pi, folded to [-pi/2, pi/2]. */
static inline PN_ATTR V SFX(sin_reduced)(V vx) {
  const V vx2 = v_mul(vx, vx);
  V vp = v_fmadd(vx2, v_set1(3.2340581529e-03f), v_set1(-1.3314664364e-01f));
  vp = v_fmadd(vx2, vp, v_set1(1.0f));
  vp = v_mul(vx, vp);
  V vq = v_fmadd(vx2, v_set1(4.8770775902e-04f), v_set1(3.3519912511e-02f));
  vq = v_fmadd(vx2, vq, v_set1(1.0f));
  return v_div(vp, vq);
}

static inline PN_ATTR V SFX(fold)(V vx) {
  const V vpi = v_set1(3.1415927f);
  vx = v_min(vx, v_sub(vpi, vx));
  vx = v_max(vx, v_sub(v_sub(v_set1(0.0f), vpi), vx));
  return v_min(vx, v_sub(vpi, vx));
}

static inline PN_ATTR V SFX(minus_2pi_multiples)(V vx) {
  V vk = v_round(v_mul(vx, v_set1(0.15915494f)));
  vx = v_fnmadd(vk, v_set1(6.28125f), vx);
  return v_fnmadd(vk, v_set1(1.9353072e-3), vx);
}

static inline PN_ATTR V SFX(sin)(V vx, const float* unused) {
  (void)unused;
  return SFX(sin_reduced)(SFX(fold)(SFX(minus_2pi_multiples)(vx)));
}

/* f32-vcos rational_5_4_div: cos(x) = sin(pi/2 - x), after the same reduction. */
static inline PN_ATTR V SFX(cos)(V vx, const float* unused) {
  (void)unused;
  vx = v_sub(v_set1(1.5707964f), SFX(minus_2pi_multiples)(vx));
  return SFX(sin_reduced)(SFX(fold)(vx));
}

/* f32-vexp rational_3_2_div: 2^z times a rational 2^r, z the rounded x log2(e) clamped to [-127, 128]. */
static inline PN_ATTR V SFX(exp)(V vx, const float* unused) {
  (void)unused;
  V vz_prime = v_mul(vx, v_set1(1.44269504089f));
  vz_prime = v_min(v_max(vz_prime, v_set1(-127.0f)), v_set1(128.0f));
  const V vmagic = v_set1(12582912.0f); /* 2^23 + 2^22: rounds to an integer */
  const V vz = v_sub(v_add(vmagic, vz_prime), vmagic);
  const V vr = v_sub(vz_prime, vz);
  const V v2z = v_sll23(v_add(vz, v_set1(8388735.0f))); /* 2^23 + 127: the biased exponent */
  V vp = v_fmadd(vr, v_set1(5.5380910635e-03f), v_set1(7.2068706155e-02f));
  vp = v_fmadd(vr, vp, v_set1(4.1594290733e-01f));
  vp = v_fmadd(vr, vp, v_set1(1.0f));
  V vq = v_fmadd(vr, v_set1(2.3986088112e-02f), v_set1(-2.7720427513e-01f));
  vq = v_fmadd(vr, vq, v_set1(1.0f));
  return v_mul(v2z, v_div(vp, vq));
}

/* f32-vtanh rational_9_8_div (the fused multiply-add variant's clamp). */
static inline PN_ATTR V SFX(tanh)(V vx, const float* unused) {
  (void)unused;
  vx = v_min(v_set1(7.9807181358e+00f), vx);
  vx = v_max(v_set1(-7.9807181358e+00f), vx);
  const V vx2 = v_mul(vx, vx);
  V vp = v_fmadd(vx2, v_set1(1.4248920266e-08f), v_set1(2.1235626264e-05f));
  vp = v_fmadd(vx2, vp, v_set1(3.5330520477e-03f));
  vp = v_fmadd(vx2, vp, v_set1(1.3412411511e-01f));
  vp = v_fmadd(vx2, vp, v_set1(1.0f));
  vp = v_mul(vx, vp);
  V vq = v_fmadd(vx2, v_set1(8.1365948290e-07f), v_set1(3.3472978976e-04f));
  vq = v_fmadd(vx2, vq, v_set1(2.6018999517e-02f));
  vq = v_fmadd(vx2, vq, v_set1(4.6745735407e-01f));
  vq = v_fmadd(vx2, vq, v_set1(1.0f));
  return v_div(vp, vq);
}

/* f32-vgelu rational_12_10_div: x/2 (1 + erf(x / sqrt 2)), erf as a rational function of the clamped x. */
static inline PN_ATTR V SFX(gelu)(V vx_orig, const float* unused) {
  (void)unused;
  const V vmax_abs_x = v_set1(5.1638283730e+00f);
  V vx = v_min(vmax_abs_x, vx_orig);
  vx = v_max(v_sub(v_set1(0.0f), vmax_abs_x), vx);
  const V vx2 = v_mul(vx, vx);
  V vp = v_fmadd(vx2, v_set1(4.5835321316e-08f), v_set1(1.2609783880e-05f));
  vp = v_fmadd(vx2, vp, v_set1(3.2973114867e-04f));
  vp = v_fmadd(vx2, vp, v_set1(9.3065137044e-03f));
  vp = v_fmadd(vx2, vp, v_set1(6.6972173750e-02f));
  vp = v_fmadd(vx2, vp, v_set1(7.9788452387e-01f));
  vp = v_mul(vx, vp);
  V vq = v_fmadd(vx2, v_set1(1.1988805682e-06f), v_set1(7.2267655923e-05f));
  vq = v_fmadd(vx2, vq, v_set1(1.8622842617e-03f));
  vq = v_fmadd(vx2, vq, v_set1(2.8431978077e-02f));
  vq = v_fmadd(vx2, vq, v_set1(2.5060352683e-01f));
  vq = v_fmadd(vx2, vq, v_set1(1.0f));
  const V verf = v_div(vp, vq);
  return v_mul(v_mul(vx_orig, v_set1(0.5f)), v_add(verf, v_set1(1.0f)));
}

/* f32-vhswish: x min(max(x / 6 + 1/2, 0), 1), the first step one fused multiply-add. */
static inline PN_ATTR V SFX(hardswish)(V vx, const float* unused) {
  (void)unused;
  V vacc = v_fmadd(vx, v_set1(0x1.555556p-3f), v_set1(0.5f));
  vacc = v_max(vacc, v_set1(0.0f));
  vacc = v_min(vacc, v_set1(1.0f));
  return v_mul(vacc, vx);
}

/* f32-vlog rational_3_3_div after the family's exponent extraction: log(x) = e ln 2 + log(m), for vx = x sqrt(2)
 * and its exponent e, m its significand scaled into [sqrt(1/2), sqrt(2)), log(1 + t) a rational function of
 * t = m - 1. */
static inline PN_ATTR V SFX(log_rest)(V vx, V vexp) {
  const V vone = v_set1(1.0f);
  vx = v_or(v_and(vx, v_cast(v_set1i(0x007FFFFF))), vone);
  vx = v_sub(v_mul(vx, v_set1(7.0710688829e-01)), vone);
  V vp = v_fmadd(vx, v_set1(1.824996918440e-01), vone);
  vp = v_fmadd(vx, vp, vone);
  vp = v_mul(vx, vp);
  V vq = v_fmadd(vx, v_set1(0.049584995955), v_set1(0.599170029163));
  vq = v_fmadd(vx, vq, v_set1(1.5f));
  vq = v_fmadd(vx, vq, vone);
  return v_fmadd(vexp, v_set1(0.693147180559945309417232121458176568) /* M_LN2 */, v_div(vp, vq));
}

/* y[i] = f(x[i]) for i in [0, n): whole vectors, then the rest through a zero-padded vector (lanes are
 * independent, so results do not depend on where a lane falls). */
#define PN_MAP(f)                                                                                      \
  static PN_ATTR void SFX(map_##f)(const float* x, float* y, int64_t n, const float* params) {         \
    int64_t i = 0;                                                                                     \
    for (; i + LANES <= n; i += LANES) v_storeu(y + i, SFX(f)(v_loadu(x + i), params));                 \
    if (i < n) {                                                                                       \
      float tail[LANES] = {0};                                                                         \
      memcpy(tail, x + i, (size_t)(n - i) * sizeof(float));                                            \
      v_storeu(tail, SFX(f)(v_loadu(tail), params));                                                    \
      memcpy(y + i, tail, (size_t)(n - i) * sizeof(float));                                            \
    }                                                                                                  \
  }

PN_MAP(sin)
PN_MAP(cos)
PN_MAP(exp)
PN_MAP(tanh)
PN_MAP(gelu)
PN_MAP(hardswish)
