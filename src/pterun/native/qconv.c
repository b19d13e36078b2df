/* Static 8-bit 2-d convolutions on NHWC images: XNNPACK's qs8 and qs8_qc8w convolutions, depthwise ones
 * included.
 *
 * XNNPACK sums (x - input zero point) * w over each output's window in int32: it packs the bias minus the input
 * zero point times the sum of the output's weights, and pads images with the input zero point, so padded taps
 * add nothing. Any order of the sums gives the same int32 (wrapping), so the kernels here sum as suits them.
 * Then XNNPACK's "fp32" requantization, per output, the same in its dwconv, gemm and igemm kernels on x86:
 *
 *   float(acc) * scale, min(., qmax - zero point), rounded half to even (cvtps: out of range gives INT32_MIN),
 *   saturated to int16 (packs), plus the zero point (saturating), saturated to int8, clamped to [qmin, qmax];
 *
 * which is, in int32 arithmetic, clamp(max(rounded, -32768) + zero point, qmin, qmax). The requantization
 * scales (input scale times the channel's kernel scale over the output scale, in float32) come from the caller.
 *
 * Depthwise convolutions (one input and one output channel per group) run a direct kernel over channels, as
 * XNNPACK's dwconv does. Every other one (dense, grouped, depthwise with a multiplier) is a matrix product per
 * group: windows are gathered into packed rows, a block of rows at a time, and multiplied by the group's
 * weights 8 rows by 16 outputs at a time (XNNPACK's igemm reads windows through pointers instead; the sums are
 * the same). With AVX-512 VNNI rows are gathered as unsigned bytes (x + 128, the top bit flipped) for vpdpbusd,
 * 8 inputs of a row against 8 weights of each output (two lanes of 4, summed at the end, as XNNPACK's "c8"
 * kernels do), and 128 times the sum of the weights is taken back in the packed bias; with AVX2 they are
 * widened to 16 bits for vpmaddwd (exact: no pair sum reaches 2^31).
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "native.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define TILE 16 /* outputs per tile of packed weights */
#define MR 8    /* rows of one micro-kernel call */
#define MB 64   /* rows a task gathers at a time */

struct pn_qconv {
  int isa, depthwise;
  int narrow;      /* depthwise with AVX-512 VNNI and 16 channels past a multiple of 32: the 16-channel kernel */
  int direct;      /* pointwise, unit strides, no padding, cin_g a multiple of 8: rows are the image's pixels */
  int64_t groups, cin_g, cout_g, cin, cout;
  int64_t kh, kw, sh, sw, dh, dw, pt, pl;
  int64_t k, kp;   /* inputs of a group's window, and rounded up to 8 (the weights there are zeros) */
  int64_t tiles;   /* per group */
  int64_t cp;      /* depthwise: channels rounded up to 32 */
  void* weights;   /* matrix products: [groups][tiles][kp / 8][16][8] int8 (avx512vnni, portable) or
                    * [groups][tiles][kp / 2][16][2] int16 (avx2); depthwise: [kh * kw][cp] int8 */
  int32_t* init;   /* [groups][tiles * 16] or [cp]: bias - (input zero point [+ 128]) * sum(w), wrapping */
  float* scale;    /* the same layout: requantization scales */
  int8_t* zero;    /* depthwise: cp input zero points, what padded taps read */
  int16_t* wide;   /* depthwise, SIMD: weights as pairs of taps (dw_avx512_body, dw_avx2_body) */
  uint8_t pad;     /* matrix products: the byte a padded tap gathers as (the zero point, flipped for vnni) */
  int32_t izp, ozp, qmin, qmax;
};

static inline int32_t requantize(int32_t acc, float scale, const pn_qconv* L) {
  float v = (float)acc * scale;
  const float top = (float)(L->qmax - L->ozp);
  v = v < top ? v : top;
  /* cvtps: nearest even; below INT32_MIN (the only way out of range here) gives INT32_MIN */
  int32_t q = v >= -2147483648.0f ? (int32_t)__builtin_rintf(v) : INT32_MIN;
  q = q < -32768 ? -32768 : q;
  q += L->ozp;
  return q < L->qmin ? L->qmin : q > L->qmax ? L->qmax : q;
}

/* -- gathering rows ---------------------------------------------------------------------------------------- */

/* Each thread's buffer of gathered rows, grown as layers need (never freed: the pool's workers live on). */
static _Thread_local void* rows_buffer;
static _Thread_local size_t rows_bytes;

static void* thread_rows(size_t bytes) {
  if (bytes > rows_bytes) {
    free(rows_buffer);
    rows_buffer = malloc(bytes);
    rows_bytes = rows_buffer ? bytes : 0;
  }
  return rows_buffer;
}

typedef struct {
  const pn_qconv* L;
  int64_t h, w, oh, ow;
  const int8_t* x;
  int8_t* y;
  _Atomic int failed;
} run_args;

/* The windows of output pixels [p0, p0 + count) for group g, each as kp values of type T (then zeros): runs
 * copied by COPY(dst, src, n) (which converts them: n values, a kernel row's taps at once where they are
 * neighbours in the image, else one tap's cin_g) or, for padded taps, set by FILL(dst, n). Stores of bytes may
 * alias anything, so everything the loops read is a local. */
#define DEFINE_GATHER(NAME, TARGET, T, SETUP, COPY, FILL)                                                  \
  static TARGET void NAME(const pn_qconv* L, const run_args* a, int64_t p0, int64_t count, int64_t g, T* rows) { \
    const int64_t c = L->cin_g, k = L->k, kp = L->kp, cin = L->cin, kh = L->kh, kw = L->kw;               \
    const int64_t sh = L->sh, sw = L->sw, dh = L->dh, dw = L->dw, pt = L->pt, pl = L->pl;                   \
    const int64_t h = a->h, w = a->w, oh = a->oh, ow = a->ow;                                              \
    const int joined = dw == 1 && (L->groups == 1 || kw == 1); /* a kernel row's taps: one run */         \
    const int8_t* x = a->x + g * c;                                                                        \
    SETUP                                                                                                  \
    int64_t ox = p0 % ow, oy = (p0 / ow) % oh, ni = p0 / (ow * oh);                                        \
    for (int64_t r = 0; r < count; r++) {                                                                  \
      T* at = rows + r * kp;                                                                               \
      const int8_t* image = x + ni * h * w * cin;                                                          \
      const int64_t ix0 = ox * sw - pl;                                                                    \
      const int row_inside = ix0 >= 0 && ix0 + (kw - 1) * dw < w;                                          \
      for (int64_t ky = 0; ky < kh; ky++) {                                                                \
        const int64_t iy = oy * sh - pt + ky * dh;                                                         \
        if (iy < 0 || iy >= h) {                                                                           \
          FILL(at, kw * c);                                                                                \
          at += kw * c;                                                                                    \
        } else if (joined && row_inside) {                                                                 \
          COPY(at, image + (iy * w + ix0) * cin, kw * c);                                                  \
          at += kw * c;                                                                                    \
        } else {                                                                                           \
          for (int64_t kx = 0; kx < kw; kx++, at += c) {                                                   \
            const int64_t ix = ix0 + kx * dw;                                                              \
            if (ix >= 0 && ix < w) {                                                                       \
              COPY(at, image + (iy * w + ix) * cin, c);                                                    \
            } else {                                                                                       \
              FILL(at, c);                                                                                 \
            }                                                                                              \
          }                                                                                                \
        }                                                                                                  \
      }                                                                                                    \
      for (int64_t i = k; i < kp; i++) rows[r * kp + i] = 0;                                               \
      if (++ox == ow) {                                                                                    \
        ox = 0;                                                                                            \
        if (++oy == oh) oy = 0, ni++;                                                                      \
      }                                                                                                    \
    }                                                                                                      \
  }

#define SETUP_S8 const int8_t izp = (int8_t)L->izp;
#define COPY_S8(dst, src, n) memcpy((dst), (src), (size_t)(n))
#define FILL_S8(dst, n) memset((dst), izp, (size_t)(n))
DEFINE_GATHER(gather_portable, , int8_t, SETUP_S8, COPY_S8, FILL_S8)

/* -- micro-kernels: 8 gathered rows times 16 or 32 outputs, requantized into y -------------------------------- */

typedef struct {
  const pn_qconv* L;
  const int32_t* init;
  const float* scale;
  int8_t* y;          /* the block's first output */
  int64_t y_stride;   /* between rows (pixels) */
  int rows, cols;     /* valid rows (<= 8) and outputs (<= 16 nt) */
} block_out;

static void mk_portable(const int8_t* a, int64_t kp, const int8_t* b, const block_out* o) {
  for (int r = 0; r < o->rows; r++) {
    int32_t acc[TILE] = {0};
    const int8_t* ar = a + r * kp;
    for (int64_t s = 0; s < kp / 8; s++)
      for (int c = 0; c < TILE; c++)
        for (int i = 0; i < 8; i++) acc[c] += (int32_t)ar[8 * s + i] * b[(s * TILE + c) * 8 + i];
    int8_t* y = o->y + r * o->y_stride;
    for (int c = 0; c < TILE && c < o->cols; c++)
      y[c] = (int8_t)requantize((int32_t)((uint32_t)acc[c] + (uint32_t)o->init[c]), o->scale[c], o->L);
  }
}

#if defined(__x86_64__)

#define VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))
#define AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl")))
#define AVX2_TARGET __attribute__((target("avx2,fma")))

/* Runs 64 bytes at a time, the last in one masked step. */
#define SETUP_FLIP const __m512i flip = _mm512_set1_epi8((char)0x80), pad = _mm512_set1_epi8((char)L->pad);
#define COPY_FLIP(dst, src, n)                                                                                \
  for (int64_t i_ = 0; i_ < (n); i_ += 64) {                                                                  \
    const __mmask64 m_ = (n) - i_ >= 64 ? ~(__mmask64)0 : (__mmask64)((~UINT64_C(0)) >> (64 - ((n) - i_)));  \
    _mm512_mask_storeu_epi8((dst) + i_, m_, _mm512_xor_si512(_mm512_maskz_loadu_epi8(m_, (src) + i_), flip)); \
  }
#define FILL_FLIP(dst, n)                                                                                     \
  for (int64_t i_ = 0; i_ < (n); i_ += 64)                                                                    \
    _mm512_mask_storeu_epi8((dst) + i_, (n) - i_ >= 64 ? ~(__mmask64)0 : (__mmask64)((~UINT64_C(0)) >> (64 - ((n) - i_))), pad);
DEFINE_GATHER(gather_vnni, AVX512_TARGET, uint8_t, SETUP_FLIP, COPY_FLIP, FILL_FLIP)

#define SETUP_WIDEN const int16_t izp = (int16_t)L->izp;
#define COPY_WIDEN(dst, src, n)                                                                               \
  {                                                                                                          \
    int64_t i_ = 0;                                                                                          \
    for (; i_ + 16 <= (n); i_ += 16)                                                                         \
      _mm256_storeu_si256((__m256i*)((dst) + i_), _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)((src) + i_)))); \
    for (; i_ < (n); i_++) (dst)[i_] = (src)[i_];                                                             \
  }
#define FILL_WIDEN(dst, n) for (int64_t f_ = 0; f_ < (n); f_++) (dst)[f_] = izp;
DEFINE_GATHER(gather_avx2, AVX2_TARGET, int16_t, SETUP_WIDEN, COPY_WIDEN, FILL_WIDEN)

/* 16 sums (int32) requantized into 16 int8 values. */
static inline AVX512_TARGET __m128i requantize16(__m512i acc, __m512i init, __m512 scale, __m512 top, __m512i zp,
                                                 __m512i lo, __m512i hi) {
  __m512 v = _mm512_min_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(acc, init)), scale), top);
  __m512i q = _mm512_max_epi32(_mm512_cvtps_epi32(v), _mm512_set1_epi32(-32768));
  q = _mm512_min_epi32(_mm512_max_epi32(_mm512_add_epi32(q, zp), lo), hi);
  return _mm512_cvtepi32_epi8(q);
}

static inline AVX512_TARGET void store16(int8_t* y, __m128i v, int cols) {
  if (cols >= 16) _mm_storeu_si128((__m128i*)y, v);
  else if (cols > 0) _mm_mask_storeu_epi8(y, (__mmask16)((1u << cols) - 1), v);
}

#define LOAD32(p) ({ int32_t v_; memcpy(&v_, (p), 4); v_; })
#define LOAD64(p) ({ int64_t v_; memcpy(&v_, (p), 8); v_; })

/* Row r's 8 inputs broadcast against 16 outputs' 8 weights (two vectors of 8 outputs, a pair of lanes each);
 * signed inputs read from the image itself have their top bits flipped here (XNNPACK's kernels do the same). */
#define VNNI_ROW(r)                                                    \
  {                                                                    \
    __m512i x_ = _mm512_set1_epi64(LOAD64(a##r + at));                 \
    if (flip) x_ = _mm512_xor_si512(x_, sign);                         \
    PN_DPBUSD(a##r##0, x_, w0);                                        \
    PN_DPBUSD(a##r##1, x_, w1);                                        \
  }
/* The pairs of lanes summed into 16 outputs, requantized and stored. */
#define VNNI_STORE(r)                                                                                        \
  if (r < o->rows) {                                                                                         \
    const __m512i sum_ = _mm512_add_epi32(_mm512_permutex2var_epi32(a##r##0, even, a##r##1),                 \
                                          _mm512_permutex2var_epi32(a##r##0, odd, a##r##1));                 \
    store16(o->y + r * o->y_stride, requantize16(sum_, init, scale, top, zp, lo, hi), o->cols);             \
  }

/* 8 rows (row stride `stride` bytes: unsigned gathered rows, or with `flip` the image's signed ones) of kp
 * inputs, a multiple of 8, times one tile of weights [kp / 8][16][8]. */
static inline __attribute__((always_inline)) VNNI_TARGET void mk_vnni_body(const uint8_t* a, int64_t stride,
                                                                           int64_t kp, const int8_t* b,
                                                                           const block_out* o, const int flip) {
  const uint8_t *a0 = a, *a1 = a + stride, *a2 = a + 2 * stride, *a3 = a + 3 * stride, *a4 = a + 4 * stride,
                *a5 = a + 5 * stride, *a6 = a + 6 * stride, *a7 = a + 7 * stride;
  const __m512i sign = _mm512_set1_epi8((char)0x80);
  __m512i a00 = _mm512_setzero_si512(), a10 = a00, a20 = a00, a30 = a00, a40 = a00, a50 = a00, a60 = a00,
          a70 = a00, a01 = a00, a11 = a00, a21 = a00, a31 = a00, a41 = a00, a51 = a00, a61 = a00, a71 = a00;
  for (int64_t at = 0; at < kp; at += 8) {
    const __m512i w0 = _mm512_loadu_si512(b + at * TILE), w1 = _mm512_loadu_si512(b + at * TILE + 64);
    VNNI_ROW(0) VNNI_ROW(1) VNNI_ROW(2) VNNI_ROW(3) VNNI_ROW(4) VNNI_ROW(5) VNNI_ROW(6) VNNI_ROW(7)
  }
  const pn_qconv* L = o->L;
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  const __m512 top = _mm512_set1_ps((float)(L->qmax - L->ozp));
  const __m512i zp = _mm512_set1_epi32(L->ozp), lo = _mm512_set1_epi32(L->qmin), hi = _mm512_set1_epi32(L->qmax);
  const __m512i init = _mm512_loadu_si512(o->init);
  const __m512 scale = _mm512_loadu_ps(o->scale);
  VNNI_STORE(0) VNNI_STORE(1) VNNI_STORE(2) VNNI_STORE(3) VNNI_STORE(4) VNNI_STORE(5) VNNI_STORE(6) VNNI_STORE(7)
}

static VNNI_TARGET void mk_vnni(const uint8_t* a, int64_t kp, const int8_t* b, const block_out* o) {
  mk_vnni_body(a, kp, kp, b, o, 0);
}

static VNNI_TARGET void mk_vnni_direct(const int8_t* a, int64_t stride, int64_t kp, const int8_t* b,
                                       const block_out* o) {
  mk_vnni_body((const uint8_t*)a, stride, kp, b, o, 1);
}

/* 8 sums (int32) requantized into 8 int8 values, in the low half of the result. */
static inline AVX2_TARGET __m128i requantize8(__m256i acc, __m256i init, __m256 scale, __m256 top, __m256i zp,
                                              __m256i lo, __m256i hi) {
  __m256 v = _mm256_min_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_add_epi32(acc, init)), scale), top);
  __m256i q = _mm256_max_epi32(_mm256_cvtps_epi32(v), _mm256_set1_epi32(-32768));
  q = _mm256_min_epi32(_mm256_max_epi32(_mm256_add_epi32(q, zp), lo), hi);
  const __m128i q16 = _mm_packs_epi32(_mm256_castsi256_si128(q), _mm256_extracti128_si256(q, 1));
  return _mm_packs_epi16(q16, q16); /* in range already: no saturation */
}

static inline AVX2_TARGET void store8(int8_t* y, __m128i v, int cols) {
  if (cols >= 8) {
    _mm_storel_epi64((__m128i*)y, v);
  } else if (cols > 0) {
    int8_t lanes[16];
    _mm_storeu_si128((__m128i*)lanes, v);
    memcpy(y, lanes, (size_t)cols);
  }
}

#define AVX2_ROW(r)                                                                    \
  {                                                                                    \
    const __m256i x_ = _mm256_set1_epi32(LOAD32(a##r + at));                           \
    c##r##0 = _mm256_add_epi32(c##r##0, _mm256_madd_epi16(x_, w0));                    \
    c##r##1 = _mm256_add_epi32(c##r##1, _mm256_madd_epi16(x_, w1));                    \
  }
#define AVX2_STORE(r, h)                                                                                     \
  if (r0 + r < o->rows)                                                                                      \
    store8(o->y + (r0 + r) * o->y_stride + 8 * h, requantize8(c##r##h, init##h, scale##h, top, zp, lo, hi),   \
           cols - 8 * h);

/* 4 rows of 16-bit pairs (row stride kp values) times one tile: [kp / 2][16][2] int16, as two vectors of 8. */
static AVX2_TARGET void mk_avx2_4(const int16_t* a, int64_t kp, const int16_t* b, const block_out* o, int r0,
                                  int cols) {
  const int16_t *a0 = a + r0 * kp, *a1 = a0 + kp, *a2 = a1 + kp, *a3 = a2 + kp;
  __m256i c00 = _mm256_setzero_si256(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00, c30 = c00,
          c31 = c00;
  for (int64_t at = 0; at < kp; at += 2) {
    const __m256i w0 = _mm256_loadu_si256((const __m256i*)(b + at * TILE));
    const __m256i w1 = _mm256_loadu_si256((const __m256i*)(b + at * TILE + 16));
    AVX2_ROW(0) AVX2_ROW(1) AVX2_ROW(2) AVX2_ROW(3)
  }
  const pn_qconv* L = o->L;
  const __m256 top = _mm256_set1_ps((float)(L->qmax - L->ozp));
  const __m256i zp = _mm256_set1_epi32(L->ozp), lo = _mm256_set1_epi32(L->qmin), hi = _mm256_set1_epi32(L->qmax);
  const __m256i init0 = _mm256_loadu_si256((const __m256i*)o->init);
  const __m256i init1 = _mm256_loadu_si256((const __m256i*)(o->init + 8));
  const __m256 scale0 = _mm256_loadu_ps(o->scale), scale1 = _mm256_loadu_ps(o->scale + 8);
  AVX2_STORE(0, 0) AVX2_STORE(0, 1) AVX2_STORE(1, 0) AVX2_STORE(1, 1)
  AVX2_STORE(2, 0) AVX2_STORE(2, 1) AVX2_STORE(3, 0) AVX2_STORE(3, 1)
}

static AVX2_TARGET void mk_avx2(const int16_t* a, int64_t kp, const int16_t* b, const block_out* o) {
  mk_avx2_4(a, kp, b, o, 0, o->cols);
  if (o->rows > 4) mk_avx2_4(a, kp, b, o, 4, o->cols);
}

#endif

/* -- depthwise ---------------------------------------------------------------------------------------------- */

/* Where an output row's taps read: every tap's offset from a pixel's first (off), and the pixels whose window
 * lies inside the image (the row inside, and ox in [ox_lo, ox_hi]); the others take the row of zero points
 * where a tap falls outside. */
typedef struct {
  const int8_t* image;
  int64_t oy, ox_lo, ox_hi;
  int inside;
  int64_t off[256];
} row_taps;

static void row_setup(const pn_qconv* L, const run_args* a, int64_t row, row_taps* r) {
  r->oy = row % a->oh;
  r->image = a->x + (row / a->oh) * a->h * a->w * L->cin;
  const int64_t iy0 = r->oy * L->sh - L->pt;
  r->inside = iy0 >= 0 && iy0 + (L->kh - 1) * L->dh < a->h && L->kh * L->kw <= 256;
  r->ox_lo = (L->pl + L->sw - 1) / L->sw;
  r->ox_hi = (a->w - 1 - (L->kw - 1) * L->dw + L->pl) / L->sw;  /* may be below ox_lo: no such pixel */
  if (a->w - 1 - (L->kw - 1) * L->dw + L->pl < 0) r->ox_hi = -1;
  for (int64_t ky = 0, t = 0; ky < L->kh && r->inside; ky++)
    for (int64_t kx = 0; kx < L->kw; kx++, t++) r->off[t] = (ky * L->dh * a->w + kx * L->dw) * L->cin;
}

/* The input pixel each tap of output pixel ox reads, or the row of zero points. */
static inline void pixel_taps(const pn_qconv* L, const run_args* a, const row_taps* r, int64_t ox,
                              const int8_t** at) {
  const int64_t kk = L->kh * L->kw;
  if (r->inside && ox >= r->ox_lo && ox <= r->ox_hi) {
    const int8_t* p = r->image + ((r->oy * L->sh - L->pt) * a->w + ox * L->sw - L->pl) * L->cin;
    for (int64_t t = 0; t < kk; t++) at[t] = p + r->off[t];
    return;
  }
  int t = 0;
  for (int64_t ky = 0; ky < L->kh; ky++) {
    const int64_t iy = r->oy * L->sh - L->pt + ky * L->dh;
    for (int64_t kx = 0; kx < L->kw; kx++, t++) {
      const int64_t ix = ox * L->sw - L->pl + kx * L->dw;
      at[t] = iy >= 0 && iy < a->h && ix >= 0 && ix < a->w ? r->image + (iy * a->w + ix) * L->cin : L->zero;
    }
  }
}

/* One output row: every pixel's taps, then its channels (the kernel inlined, its constants set once). */
#define DW_ROW(NAME, TARGET, BODY)                                                                    \
  static inline __attribute__((always_inline)) TARGET void NAME##_kk(const pn_qconv* L, const run_args* a, \
                                                                     int64_t row, const int8_t** at,   \
                                                                     const int64_t kk) {               \
    row_taps r;                                                                                       \
    row_setup(L, a, row, &r);                                                                         \
    int8_t* y = a->y + row * a->ow * L->cout;                                                         \
    for (int64_t ox = 0; ox < a->ow; ox++, y += L->cout) {                                            \
      pixel_taps(L, a, &r, ox, at);                                                                   \
      BODY(L, at, y, kk);                                                                             \
    }                                                                                                 \
  }                                                                                                   \
  static TARGET void NAME(const pn_qconv* L, const run_args* a, int64_t row, const int8_t** at) {     \
    const int64_t kk = L->kh * L->kw;                                                                 \
    if (kk == 9) NAME##_kk(L, a, row, at, 9);                                                         \
    else if (kk == 25) NAME##_kk(L, a, row, at, 25);                                                  \
    else NAME##_kk(L, a, row, at, kk);                                                                \
  }

static void dw_portable(const pn_qconv* L, const int8_t** at, int8_t* y) {
  const int8_t* wt = L->weights;
  const int64_t kk = L->kh * L->kw, cp = L->cp;
  for (int64_t c = 0; c < L->cin; c++) {
    uint32_t acc = (uint32_t)L->init[c];
    for (int64_t t = 0; t < kk; t++) acc += (uint32_t)((int32_t)at[t][c] * wt[t * cp + c]);
    y[c] = (int8_t)requantize((int32_t)acc, L->scale[c], L);
  }
}

#if defined(__x86_64__)

/* Two taps at a time by vpmaddwd: their bytes interleaved channel by channel (in-lane unpacks of 32 channels,
 * which leave channels 0-7 and 16-23 in one vector of pairs and 8-15 and 24-31 in the other), widened to 16
 * bits, against weight pairs packed in the same order ([cp / 32][taps / 2][64] int16 pairs). The last tap of an
 * odd count pairs with the row of zero points and zero weights. */
static inline __attribute__((always_inline)) AVX512_TARGET void dw_avx512_body(const pn_qconv* L,
                                                                              const int8_t** at, int8_t* y,
                                                                              const int64_t kk) {
  const int16_t* wide = L->wide;
  const int64_t cin = L->cin, pairs = (kk + 1) / 2;
  const __m512 top = _mm512_set1_ps((float)(L->qmax - L->ozp));
  const __m512i zp = _mm512_set1_epi32(L->ozp), lo = _mm512_set1_epi32(L->qmin), hi = _mm512_set1_epi32(L->qmax);
  for (int64_t c = 0; c < cin; c += 32) {
    const int64_t left = cin - c;
    const __mmask32 mask = left >= 32 ? ~(__mmask32)0 : (__mmask32)((UINT32_C(1) << left) - 1);
    const int16_t* wc = wide + (c / 32) * pairs * 64;
    __m512i acc0 = _mm512_setzero_si512(), acc1 = acc0;
    for (int64_t t = 0; t < pairs; t++) {
      const int8_t* second = 2 * t + 1 < kk ? at[2 * t + 1] : L->zero;
      const __m256i x0 = _mm256_maskz_loadu_epi8(mask, at[2 * t] + c);
      const __m256i x1 = _mm256_maskz_loadu_epi8(mask, second + c);
      const __m512i p0 = _mm512_cvtepi8_epi16(_mm256_unpacklo_epi8(x0, x1));
      const __m512i p1 = _mm512_cvtepi8_epi16(_mm256_unpackhi_epi8(x0, x1));
      acc0 = _mm512_add_epi32(acc0, _mm512_madd_epi16(p0, _mm512_loadu_si512(wc + t * 64)));
      acc1 = _mm512_add_epi32(acc1, _mm512_madd_epi16(p1, _mm512_loadu_si512(wc + t * 64 + 32)));
    }
    /* init and scale are in the accumulators' order too */
    const __m128i q0 = requantize16(acc0, _mm512_loadu_si512(L->init + c), _mm512_loadu_ps(L->scale + c), top, zp,
                                    lo, hi);
    const __m128i q1 = requantize16(acc1, _mm512_loadu_si512(L->init + c + 16), _mm512_loadu_ps(L->scale + c + 16),
                                    top, zp, lo, hi);
    const __m256i out = _mm256_set_m128i(_mm_unpackhi_epi64(q0, q1), _mm_unpacklo_epi64(q0, q1));
    _mm256_mask_storeu_epi8(y + c, mask, out);
  }
}

DW_ROW(dw_avx512, AVX512_TARGET, dw_avx512_body)

/* The same with 16 channels (one 128-bit lane: natural order): [cp / 16][taps / 2][32] int16 pairs. Channels
 * past the last 16 take the portable steps, never reading past a pixel's channels. */
static inline __attribute__((always_inline)) AVX2_TARGET void dw_avx2_body(const pn_qconv* L, const int8_t** at,
                                                                          int8_t* y, const int64_t kk) {
  const int16_t* wide = L->wide;
  const int64_t cin = L->cin, pairs = (kk + 1) / 2;
  const __m256 top = _mm256_set1_ps((float)(L->qmax - L->ozp));
  const __m256i zp = _mm256_set1_epi32(L->ozp), lo = _mm256_set1_epi32(L->qmin), hi = _mm256_set1_epi32(L->qmax);
  int64_t c = 0;
  for (; c + 16 <= cin; c += 16) {
    const int16_t* wc = wide + (c / 16) * pairs * 32;
    __m256i acc0 = _mm256_setzero_si256(), acc1 = acc0;
    for (int64_t t = 0; t < pairs; t++) {
      const int8_t* second = 2 * t + 1 < kk ? at[2 * t + 1] : L->zero;
      const __m128i x0 = _mm_loadu_si128((const __m128i*)(at[2 * t] + c));
      const __m128i x1 = _mm_loadu_si128((const __m128i*)(second + c));
      const __m256i p0 = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(x0, x1));
      const __m256i p1 = _mm256_cvtepi8_epi16(_mm_unpackhi_epi8(x0, x1));
      acc0 = _mm256_add_epi32(acc0, _mm256_madd_epi16(p0, _mm256_loadu_si256((const __m256i*)(wc + t * 32))));
      acc1 = _mm256_add_epi32(acc1, _mm256_madd_epi16(p1, _mm256_loadu_si256((const __m256i*)(wc + t * 32 + 16))));
    }
    const __m128i q0 = requantize8(acc0, _mm256_loadu_si256((const __m256i*)(L->init + c)),
                                   _mm256_loadu_ps(L->scale + c), top, zp, lo, hi);
    const __m128i q1 = requantize8(acc1, _mm256_loadu_si256((const __m256i*)(L->init + c + 8)),
                                   _mm256_loadu_ps(L->scale + c + 8), top, zp, lo, hi);
    _mm_storeu_si128((__m128i*)(y + c), _mm_unpacklo_epi64(q0, q1));
  }
  const int8_t* wt = L->weights;
  for (; c < cin; c++) {
    uint32_t acc = (uint32_t)L->init[c];
    for (int64_t t = 0; t < kk; t++) acc += (uint32_t)((int32_t)at[t][c] * wt[t * L->cp + c]);
    y[c] = (int8_t)requantize((int32_t)acc, L->scale[c], L);
  }
}

DW_ROW(dw_avx2, AVX2_TARGET, dw_avx2_body)

#endif

static inline void dw_portable_body(const pn_qconv* L, const int8_t** at, int8_t* y, int64_t kk) {
  (void)kk;
  dw_portable(L, at, y);
}
DW_ROW(dw_portable_row, , dw_portable_body)

/* One output row (all its pixels) of a depthwise convolution. */
static void dw_task(void* ctx, int64_t row) {
  run_args* a = ctx;
  const pn_qconv* L = a->L;
  const int8_t* at[256];
  const int8_t** pointers = L->kh * L->kw <= 256 ? at : thread_rows((size_t)(L->kh * L->kw) * sizeof(void*));
  if (!pointers) {
    atomic_store(&a->failed, 1);
    return;
  }
#if defined(__x86_64__)
  if (L->isa == PN_AVX512VNNI && !L->narrow) return dw_avx512(L, a, row, pointers);
  if (L->isa == PN_AVX2 || L->narrow) return dw_avx2(L, a, row, pointers);
#endif
  dw_portable_row(L, a, row, pointers);
}

/* -- matrix products ---------------------------------------------------------------------------------------- */

typedef struct {
  run_args base;
  int64_t rows, row_blocks, chunks, tiles_per_chunk;
} gemm_args;

static void gemm_task(void* ctx, int64_t task) {
  gemm_args* a = ctx;
  const pn_qconv* L = a->base.L;
  const int64_t chunk = task % a->chunks, g = (task / a->chunks) % L->groups, rb = task / (a->chunks * L->groups);
  const int64_t r0 = rb * MB, nr = a->rows - r0 < MB ? a->rows - r0 : MB;
  const int64_t padded = (nr + MR - 1) / MR * MR;
  const size_t width = L->isa == PN_AVX2 ? 2 : 1;
  uint8_t* rows = thread_rows((size_t)(padded * L->kp) * width);
  if (!rows) {
    atomic_store(&a->base.failed, 1);
    return;
  }
  /* pointwise convolutions with VNNI read whole blocks of 8 pixels from the image: only the rest is gathered */
  const int64_t direct = L->direct && L->isa == PN_AVX512VNNI ? nr / MR * MR : 0;
  const int8_t* image = a->base.x + r0 * L->cin + g * L->cin_g;
#if defined(__x86_64__)
  if (L->isa == PN_AVX512VNNI) gather_vnni(L, &a->base, r0 + direct, nr - direct, g, rows + direct * L->kp);
  else if (L->isa == PN_AVX2) gather_avx2(L, &a->base, r0, nr, g, (int16_t*)rows);
  else
#endif
    gather_portable(L, &a->base, r0, nr, g, (int8_t*)rows);
  memset(rows + nr * L->kp * width, 0, (size_t)((padded - nr) * L->kp) * width);
  (void)image, (void)direct; /* read by the x86 kernels alone */
  const int64_t t0 = chunk * a->tiles_per_chunk;
  const int64_t t1 = t0 + a->tiles_per_chunk < L->tiles ? t0 + a->tiles_per_chunk : L->tiles;
  const int64_t tile_bytes = L->kp * TILE * (int64_t)width;
  const uint8_t* weights = (const uint8_t*)L->weights + g * L->tiles * tile_bytes;
  for (int64_t t = t0; t < t1; t++) {
    const int64_t o0 = g * L->cout_g + t * TILE; /* the first output channel */
    block_out o = {L, L->init + g * L->tiles * TILE + t * TILE, L->scale + g * L->tiles * TILE + t * TILE,
                   a->base.y + r0 * L->cout + o0, L->cout, 0,
                   (int)(L->cout_g - t * TILE < TILE ? L->cout_g - t * TILE : TILE)};
    const uint8_t* b = weights + t * tile_bytes;
    for (int64_t m = 0; m < nr; m += MR) {
      o.rows = (int)(nr - m < MR ? nr - m : MR);
      const uint8_t* am = rows + m * L->kp * width;
#if defined(__x86_64__)
      if (m < direct) mk_vnni_direct(image + m * L->cin, L->cin, L->kp, (const int8_t*)b, &o);
      else if (L->isa == PN_AVX512VNNI) mk_vnni(am, L->kp, (const int8_t*)b, &o);
      else if (L->isa == PN_AVX2) mk_avx2((const int16_t*)am, L->kp, (const int16_t*)b, &o);
      else
#endif
        mk_portable((const int8_t*)am, L->kp, (const int8_t*)b, &o);
      o.y += MR * L->cout;
    }
  }
}

/* -- packing and running ------------------------------------------------------------------------------------ */

pn_qconv* pn_qconv_pack(int isa, int64_t groups, int64_t cin_g, int64_t cout_g, int64_t kh, int64_t kw, int64_t sh,
                        int64_t sw, int64_t dh, int64_t dw, int64_t pt, int64_t pl, const int8_t* weights,
                        const float* scale, const int32_t* bias, int32_t input_zero_point,
                        int32_t out_zero_point, int32_t qmin, int32_t qmax) {
  if (groups < 1 || cin_g < 1 || cout_g < 1 || kh < 1 || kw < 1) return NULL;
  pn_qconv* L = calloc(1, sizeof(pn_qconv));
  if (!L) return NULL;
#if defined(__x86_64__)
  L->isa = isa == PN_AVX512VNNI ? PN_AVX512VNNI : isa == PN_AVX2 ? PN_AVX2 : PN_PORTABLE;
#else
  (void)isa;
  L->isa = PN_PORTABLE;
#endif
  L->depthwise = cin_g == 1 && cout_g == 1;
  L->groups = groups;
  L->cin_g = cin_g;
  L->cout_g = cout_g;
  L->cin = groups * cin_g;
  L->cout = groups * cout_g;
  L->kh = kh, L->kw = kw, L->sh = sh, L->sw = sw, L->dh = dh, L->dw = dw, L->pt = pt, L->pl = pl;
  L->izp = input_zero_point, L->ozp = out_zero_point, L->qmin = qmin, L->qmax = qmax;
  const int64_t taps = kh * kw;
  if (L->depthwise) {
    /* 32 channels a step would leave half of the last one's lanes idle (a 16-channel layer: all of its steps);
     * the AVX2 kernel's 16 channels a step fit, and its sums and requantization are the same per channel */
    L->narrow = L->isa == PN_AVX512VNNI && L->cin % 32 == 16;
    const int64_t cp = L->cp = (L->cin + 31) / 32 * 32, pairs = (taps + 1) / 2;
    L->weights = pn_zeroed((size_t)(taps * cp));
    L->wide = calloc((size_t)(pairs * 2 * cp), sizeof(int16_t));
    L->init = calloc((size_t)cp, sizeof(int32_t));
    L->scale = calloc((size_t)cp, sizeof(float));
    L->zero = malloc((size_t)cp);
    if (!L->weights || !L->wide || !L->init || !L->scale || !L->zero) {
      pn_qconv_free(L);
      return NULL;
    }
    memset(L->zero, (int8_t)input_zero_point, (size_t)cp);
    int8_t* wt = L->weights;
    for (int64_t c = 0; c < L->cin; c++) {
      uint32_t total = 0;
      for (int64_t t = 0; t < taps; t++) {
        wt[t * cp + c] = weights[c * taps + t];
        total += (uint32_t)(int32_t)weights[c * taps + t];
      }
      /* where the SIMD kernels keep channel c: in-lane order for AVX-512 (see dw_avx512_body) */
      int64_t at = c;
      if (L->isa == PN_AVX512VNNI && !L->narrow) {
        const int64_t j = c % 32, lane = (j % 16) / 8 * 16 + (j / 16) * 8 + j % 8;
        at = c - j + lane;
      }
      L->init[at] = (int32_t)((uint32_t)(bias ? bias[c] : 0) - (uint32_t)input_zero_point * total);
      L->scale[at] = scale[c];
      if (L->isa == PN_PORTABLE) continue;
      const int64_t block = L->isa == PN_AVX512VNNI && !L->narrow ? 32 : 16, in = at % block; /* accumulator lane */
      for (int64_t t = 0; t < taps; t++)
        L->wide[((c / block) * pairs + t / 2) * 2 * block + 2 * in + t % 2] = weights[c * taps + t];
    }
    return L;
  }
  const int64_t k = L->k = taps * cin_g, kp = L->kp = (k + 7) / 8 * 8;
  L->direct = taps == 1 && sh == 1 && sw == 1 && pt == 0 && pl == 0 && cin_g % 8 == 0;
  const int64_t tiles = L->tiles = (cout_g + TILE - 1) / TILE;
  const size_t width = L->isa == PN_AVX2 ? 2 : 1;
  L->weights = pn_zeroed((size_t)(groups * tiles * TILE * kp) * width);
  L->init = calloc((size_t)(groups * tiles * TILE), sizeof(int32_t));
  L->scale = calloc((size_t)(groups * tiles * TILE), sizeof(float));
  if (!L->weights || !L->init || !L->scale) {
    pn_qconv_free(L);
    return NULL;
  }
  /* the unsigned rows of vpdpbusd are x + 128: 128 * sum(w) is taken back with the zero point's share */
  const uint32_t shift = (uint32_t)input_zero_point + (L->isa == PN_AVX512VNNI ? 128u : 0u);
  L->pad = L->isa == PN_AVX512VNNI ? (uint8_t)((uint8_t)input_zero_point ^ 0x80) : (uint8_t)input_zero_point;
  for (int64_t g = 0; g < groups; g++)
    for (int64_t oc = 0; oc < cout_g; oc++) {
      const int64_t o = g * cout_g + oc, t = oc / TILE, c = oc % TILE, at = g * tiles * TILE + oc;
      const int8_t* w = weights + o * k; /* [kh][kw][cin_g]: the gathered rows' order */
      uint32_t total = 0;
      for (int64_t i = 0; i < k; i++) {
        total += (uint32_t)(int32_t)w[i];
        const int64_t tile = (g * tiles + t) * TILE * kp;
        if (L->isa == PN_AVX2) ((int16_t*)L->weights)[tile + ((i / 2) * TILE + c) * 2 + i % 2] = w[i];
        else ((int8_t*)L->weights)[tile + ((i / 8) * TILE + c) * 8 + i % 8] = w[i];
      }
      L->init[at] = (int32_t)((uint32_t)(bias ? bias[o] : 0) - shift * total);
      L->scale[at] = scale[o];
    }
  return L;
}

void pn_qconv_free(pn_qconv* L) {
  if (!L) return;
  free(L->weights);
  free(L->init);
  free(L->scale);
  free(L->zero);
  free(L->wide);
  free(L);
}

int pn_qconv_isa(const pn_qconv* L) { return L->isa; }

int pn_qconv_run(const pn_qconv* L, int64_t n, int64_t h, int64_t w, const int8_t* x, int64_t oh, int64_t ow,
                 int8_t* y, int threads) {
  const int64_t rows = n * oh * ow;
  if (rows <= 0) return 0;
  if (L->depthwise) {
    run_args a = {L, h, w, oh, ow, x, y, 0};
    /* enough output rows per call to pay for waking workers: 2^16 multiply-adds a task at least */
    const int64_t work = ow * L->cin * L->kh * L->kw;
    if (threads > 1 && work * n * oh < (INT64_C(1) << 16) * 2) threads = 1;
    pn_parallel(dw_task, &a, n * oh, threads);
    return atomic_load(&a.failed) ? -1 : 0;
  }
  gemm_args a = {{L, h, w, oh, ow, x, y, 0}, rows, (rows + MB - 1) / MB, 1, L->tiles};
  const int64_t blocks = a.row_blocks * L->groups;
  const int64_t macs = rows * L->k * L->cout;
  if (threads > 1 && macs < (INT64_C(1) << 17)) threads = 1;
  if (threads > 1 && blocks < 4 * threads) {
    /* too few row blocks to balance the threads: split each group's outputs too */
    int64_t chunks = (4 * threads + blocks - 1) / blocks;
    if (chunks > L->tiles) chunks = L->tiles;
    a.tiles_per_chunk = (L->tiles + chunks - 1) / chunks;
    a.chunks = (L->tiles + a.tiles_per_chunk - 1) / a.tiles_per_chunk;
  }
  pn_parallel(gemm_task, &a, blocks * a.chunks, threads);
  return atomic_load(&a.base.failed) ? -1 : 0;
}
