/* Fully connected layers with 8-bit weights, one scale per output channel, on rows quantized at run time:
 * XNNPACK's qd8_f32_qc8w GEMM, float output. (Static 8-bit layers, qs8_qc8w, are pointwise convolutions of
 * qconv.c.)
 *
 * The sums of (x - row zero point) * w over the inputs are exact int32 (XNNPACK packs -zero point * sum(w) into
 * the accumulator's start; wrapping int32 arithmetic gives the same bits in any order). Then, per output,
 * fma(float(sum) * row scale, channel scale, bias), then the clamp as x86's maxps/minps do.
 *
 * The sums come from vpdpbusd (AVX-512 VNNI: weights as unsigned bytes, w + 128, and each row's 128 * sum(x)
 * taken back) or from vpmaddwd on values widened to 16 bits (AVX2), both exact, or from plain C.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "native.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

struct pn_q8 {
  int isa;
  int64_t n, k, kp;   /* kp: k rounded up to the kernels' groups (16), padded with zero weights */
  int64_t tiles;      /* of 16 outputs */
  int8_t* weights;    /* [tiles][kp / 4][16][4] of w + 128 (AVX-512 VNNI), [tiles][kp / 8][16][8] (AVX2), [n][kp] */
  int32_t* wsum;      /* [tiles * 16]: sum of each output's weights */
  float* scale;       /* channel scales [tiles * 16] */
  float* bias;        /* float bias, zeros without one [tiles * 16] */
  float out_min, out_max;  /* the clamp */
};

static inline float clamp_x86(float v, float lo, float hi) {
  v = v > lo ? v : lo;
  return v < hi ? v : hi;
}

/* One tile's sums for `rows` rows: sums[r][c] = sum_k x[r][k] * w[16 t + c][k] (int32), signed rows. */
typedef void (*sums_fn)(const pn_q8* L, int64_t t, int64_t rows, const int8_t* x, int64_t x_stride, int32_t* sums);

static void sums_portable(const pn_q8* L, int64_t t, int64_t rows, const int8_t* x, int64_t x_stride,
                          int32_t* sums) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < 16; c++) {
      const int64_t o = t * 16 + c;
      int32_t s = 0;
      if (o < L->n) {
        const int8_t* w = L->weights + o * L->kp;
        for (int64_t i = 0; i < L->k; i++) s += (int32_t)x[r * x_stride + i] * w[i];
      }
      sums[r * 16 + c] = s;
    }
}

#if defined(__x86_64__)

#define VNNI_ROWS 8 /* rows summed side by side: as many accumulators, to cover vpdpbusd's latency */

/* NR rows of TILES adjacent tiles (16 outputs each), inlined with both constants: each row's broadcast feeds every
 * tile. The weights are packed as unsigned bytes (w + 128), so the rows' bytes go to vpdpbusd as they are,
 * broadcast from memory: each output's sum is sum(x w) + 128 sum(x), and the row's 128 sum(x), computed once per
 * call, is taken back. (XNNPACK flips the rows to unsigned and takes back 128 sum(w) per output; both give the
 * same int32.) sums: [NR][16 TILES]. */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"), always_inline))
static inline void vnni_rows(const int8_t* tile, int64_t tile_bytes, int64_t full, int64_t tail, const int NR,
                             const int TILES, const int8_t* x, int64_t x_stride, const int32_t* xsum, int32_t* sums) {
  __m512i acc[VNNI_ROWS][2];
  for (int r = 0; r < NR; r++)
    for (int j = 0; j < TILES; j++) acc[r][j] = _mm512_setzero_si512();
  for (int64_t g = 0; g < full; g++) {
    __m512i w[2];
    for (int j = 0; j < TILES; j++) {
      _mm_prefetch((const char*)tile + j * tile_bytes + g * 64 + PN_PREFETCH_AHEAD, _MM_HINT_T0);
      w[j] = _mm512_loadu_si512(tile + j * tile_bytes + g * 64);
    }
    for (int r = 0; r < NR; r++) {
      int32_t v;
      memcpy(&v, x + r * x_stride + 4 * g, 4);
      const __m512i xv = _mm512_set1_epi32(v);
      for (int j = 0; j < TILES; j++) PN_DPBUSD(acc[r][j], w[j], xv);
    }
  }
  if (tail) { /* never past the row: the rest of the group is zeros */
    __m512i w[2];
    for (int j = 0; j < TILES; j++) w[j] = _mm512_loadu_si512(tile + j * tile_bytes + full * 64);
    for (int r = 0; r < NR; r++) {
      int32_t v = 0;
      memcpy(&v, x + r * x_stride + 4 * full, (size_t)tail);
      const __m512i xv = _mm512_set1_epi32(v);
      for (int j = 0; j < TILES; j++) PN_DPBUSD(acc[r][j], w[j], xv);
    }
  }
  for (int r = 0; r < NR; r++) {
    const __m512i correction = _mm512_set1_epi32((int32_t)((uint32_t)xsum[r] * 128u));
    for (int j = 0; j < TILES; j++)
      _mm512_storeu_si512(sums + (r * TILES + j) * 16, _mm512_sub_epi32(acc[r][j], correction));
  }
}

/* rows in groups of VNNI_ROWS, then the rest, each a constant for vnni_rows */
#define VNNI_ALL_ROWS(TILES)                                                                                  \
  do {                                                                                                        \
    int64_t r = 0;                                                                                            \
    for (; r + VNNI_ROWS <= rows; r += VNNI_ROWS) VNNI_CALL(VNNI_ROWS, TILES);                                \
    switch (rows - r) {                                                                                       \
      case 0: break;                                                                                          \
      case 1: VNNI_CALL(1, TILES); break;                                                                     \
      case 2: VNNI_CALL(2, TILES); break;                                                                     \
      case 3: VNNI_CALL(3, TILES); break;                                                                     \
      case 4: VNNI_CALL(4, TILES); break;                                                                     \
      case 5: VNNI_CALL(5, TILES); break;                                                                     \
      case 6: VNNI_CALL(6, TILES); break;                                                                     \
      default: VNNI_CALL(7, TILES); break;                                                                    \
    }                                                                                                         \
  } while (0)
#define VNNI_CALL(NR, TILES) \
  vnni_rows(tile, bytes, full, tail, NR, TILES, x + r * x_stride, x_stride, xsum + r, sums + r * 16 * (TILES))

/* `count` (1 or 2) tiles from t, for `rows` rows: sums [rows][16 count] */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))
static void sums_vnni(const pn_q8* L, int64_t t, int64_t count, int64_t rows, const int8_t* x, int64_t x_stride,
                      const int32_t* xsum, int32_t* sums) {
  const int64_t full = L->k / 4, tail = L->k % 4, bytes = (L->kp / 4) * 64;
  const int8_t* tile = L->weights + t * bytes;
  if (count == 2)
    VNNI_ALL_ROWS(2);
  else
    VNNI_ALL_ROWS(1);
}

#undef VNNI_CALL
#undef VNNI_ALL_ROWS

__attribute__((target("avx2,fma")))
static void sums_avx2(const pn_q8* L, int64_t t, int64_t rows, const int8_t* x, int64_t x_stride, int32_t* sums) {
  /* per group of 8 inputs: 16 outputs x 8 weights; each vpmaddwd takes two outputs' 8 weights against the
   * row's 8 values (widened to 16 bits), giving 4 pair sums per output, added up at the end */
  const int64_t groups = L->kp / 8, full = L->k / 8, tail = L->k % 8;
  const int8_t* tile = L->weights + t * groups * 128;
  for (int64_t r = 0; r < rows; r++) {
    __m256i acc[8];
    for (int p = 0; p < 8; p++) acc[p] = _mm256_setzero_si256();
    const int8_t* xr = x + r * x_stride;
    for (int64_t g = 0; g < full + (tail != 0); g++) {
      int64_t eight = 0; /* never past the row: the weights there are zeros */
      memcpy(&eight, xr + 8 * g, g < full ? 8 : (size_t)tail);
      const __m256i xv = _mm256_cvtepi8_epi16(_mm_set1_epi64x(eight));
      const int8_t* wg = tile + g * 128;
      _mm_prefetch((const char*)wg + PN_PREFETCH_AHEAD, _MM_HINT_T0);
      _mm_prefetch((const char*)wg + PN_PREFETCH_AHEAD + 64, _MM_HINT_T0);
      for (int p = 0; p < 8; p++) {
        const __m256i w = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i*)(wg + 16 * p)));
        acc[p] = _mm256_add_epi32(acc[p], _mm256_madd_epi16(xv, w));
      }
    }
    for (int p = 0; p < 8; p++) {
      /* lanes 0-3: output 2p, lanes 4-7: output 2p + 1 */
      int32_t lanes[8];
      _mm256_storeu_si256((__m256i*)lanes, acc[p]);
      sums[r * 16 + 2 * p] = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
      sums[r * 16 + 2 * p + 1] = (lanes[4] + lanes[5]) + (lanes[6] + lanes[7]);
    }
  }
}

#endif

pn_q8* pn_q8_pack(int isa, int64_t n, int64_t k, const int8_t* weights, int64_t w_stride, const float* scale,
                  const float* bias, float out_min, float out_max) {
  if (n <= 0 || k < 0) return NULL;
  pn_q8* L = calloc(1, sizeof(pn_q8));
  if (!L) return NULL;
#if defined(__x86_64__)
  L->isa = isa == PN_AVX512VNNI ? PN_AVX512VNNI : isa == PN_AVX2 ? PN_AVX2 : PN_PORTABLE;
#else
  L->isa = PN_PORTABLE;
#endif
  L->n = n;
  L->k = k;
  L->kp = (k + 15) / 16 * 16;
  L->tiles = (n + 15) / 16;
  L->out_min = out_min;
  L->out_max = out_max;
  const size_t padded = (size_t)(L->tiles * 16);
  L->weights = pn_zeroed((size_t)(L->tiles * 16 * L->kp));
  L->wsum = calloc(padded, sizeof(int32_t));
  L->scale = calloc(padded, sizeof(float));
  L->bias = calloc(padded, sizeof(float));
  if (!L->weights || !L->wsum || !L->scale || !L->bias) {
    pn_q8_free(L);
    return NULL;
  }
  for (int64_t o = 0; o < n; o++) {
    const int8_t* w = weights + o * w_stride;
    int32_t total = 0;
    for (int64_t i = 0; i < k; i++) total += w[i];
    L->wsum[o] = total;
    L->scale[o] = scale[o];
    if (bias) L->bias[o] = bias[o];
    const int64_t t = o / 16, c = o % 16;
    for (int64_t i = 0; i < k; i++) {
      int64_t at;
      if (L->isa == PN_AVX512VNNI) at = ((t * (L->kp / 4) + i / 4) * 16 + c) * 4 + i % 4;
      else if (L->isa == PN_AVX2) at = ((t * (L->kp / 8) + i / 8) * 8 + c / 2) * 16 + (c % 2) * 8 + i % 8;
      else at = o * L->kp + i;
      /* AVX-512 VNNI: the unsigned byte w + 128 (vpdpbusd's unsigned operand) */
      L->weights[at] = L->isa == PN_AVX512VNNI ? (int8_t)(uint8_t)(w[i] + 128) : w[i];
    }
  }
  return L;
}

void pn_q8_free(pn_q8* L) {
  if (!L) return;
  free(L->weights);
  free(L->wsum);
  free(L->scale);
  free(L->bias);
  free(L);
}

int pn_q8_isa(const pn_q8* L) { return L->isa; }

typedef struct {
  const pn_q8* L;
  int64_t rows, x_stride, out_stride, tiles_per_task;
  const int8_t* x;
  const int32_t* xsum;  /* avx512vnni: each row's sum */
  const float *zp, *xs; /* each row's zero point and scale */
  float* out;
} q8_args;

#define Q8_ROWS 64
#define XSUM_ROWS 4096

#if defined(__x86_64__)
/* The epilogue below, 16 outputs at a time: the same integer and float steps, each rounded as there (a fused
 * multiply-add, x86's max and min). */
__attribute__((target("avx512f")))
static void outputs_avx512(const pn_q8* L, int64_t t, int64_t width, int64_t rows, const int32_t* sums,
                           const float* zp, const float* xs, float* out, int64_t out_stride) {
  const __m512 lo = _mm512_set1_ps(L->out_min), hi = _mm512_set1_ps(L->out_max);
  for (int64_t r = 0; r < rows; r++) {
    const __m512i zero_point = _mm512_set1_epi32((int32_t)zp[r]);
    const __m512 row_scale = _mm512_set1_ps(xs[r]);
    for (int64_t c = 0; c < width; c += 16) {
      const int64_t o = t * 16 + c;
      if (o >= L->n) break;
      const int64_t valid = L->n - o < 16 ? L->n - o : 16;
      const __m512i s = _mm512_loadu_si512(sums + r * width + c);
      const __m512i acc = _mm512_sub_epi32(s, _mm512_mullo_epi32(zero_point, _mm512_loadu_si512(L->wsum + o)));
      __m512 v = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(acc), row_scale), _mm512_loadu_ps(L->scale + o),
                                 _mm512_loadu_ps(L->bias + o));
      v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
      _mm512_mask_storeu_ps(out + r * out_stride + o, (__mmask16)(valid == 16 ? 0xFFFF : (1u << valid) - 1), v);
    }
  }
}

/* The same, 8 outputs at a time (AVX2 and FMA3) */
__attribute__((target("avx2,fma")))
static void outputs_avx2(const pn_q8* L, int64_t t, int64_t rows, const int32_t* sums, const float* zp,
                         const float* xs, float* out, int64_t out_stride) {
  const __m256 lo = _mm256_set1_ps(L->out_min), hi = _mm256_set1_ps(L->out_max);
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  for (int64_t r = 0; r < rows; r++) {
    const __m256i zero_point = _mm256_set1_epi32((int32_t)zp[r]);
    const __m256 row_scale = _mm256_set1_ps(xs[r]);
    for (int64_t c = 0; c < 16; c += 8) {
      const int64_t o = t * 16 + c;
      if (o >= L->n) break;
      const int64_t valid = L->n - o < 8 ? L->n - o : 8;
      const __m256i s = _mm256_loadu_si256((const __m256i*)(sums + r * 16 + c));
      const __m256i w = _mm256_loadu_si256((const __m256i*)(L->wsum + o));
      const __m256i acc = _mm256_sub_epi32(s, _mm256_mullo_epi32(zero_point, w));
      __m256 v = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(acc), row_scale), _mm256_loadu_ps(L->scale + o),
                                 _mm256_loadu_ps(L->bias + o));
      v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
      _mm256_maskstore_ps(out + r * out_stride + o, _mm256_cmpgt_epi32(_mm256_set1_epi32((int32_t)valid), lanes), v);
    }
  }
}
#endif

static void q8_task(void* ctx, int64_t task) {
  const q8_args* a = ctx;
  const pn_q8* L = a->L;
  sums_fn sums = sums_portable;
#if defined(__x86_64__)
  if (L->isa == PN_AVX2) sums = sums_avx2;
#endif
  int32_t block[Q8_ROWS * 32];
  const int64_t t0 = task * a->tiles_per_task;
  const int64_t t1 = t0 + a->tiles_per_task < L->tiles ? t0 + a->tiles_per_task : L->tiles;
  /* AVX-512 VNNI: two tiles at a time where there are two */
  const int64_t step = L->isa == PN_AVX512VNNI ? 2 : 1;
  for (int64_t t = t0; t < t1; t += step) {
    const int64_t count = t + step <= t1 ? step : 1, width = 16 * count;
    for (int64_t r0 = 0; r0 < a->rows; r0 += Q8_ROWS) {
      const int64_t nr = a->rows - r0 < Q8_ROWS ? a->rows - r0 : Q8_ROWS;
#if defined(__x86_64__)
      if (L->isa == PN_AVX512VNNI) {
        sums_vnni(L, t, count, nr, a->x + r0 * a->x_stride, a->x_stride, a->xsum + r0, block);
        outputs_avx512(L, t, width, nr, block, a->zp + r0, a->xs + r0, a->out + r0 * a->out_stride, a->out_stride);
        continue;
      }
#endif
      sums(L, t, nr, a->x + r0 * a->x_stride, a->x_stride, block);
#if defined(__x86_64__)
      if (L->isa == PN_AVX2) {
        outputs_avx2(L, t, nr, block, a->zp + r0, a->xs + r0, a->out + r0 * a->out_stride, a->out_stride);
        continue;
      }
#endif
      for (int64_t r = 0; r < nr; r++)
        for (int64_t c = 0; c < width; c++) {
          const int64_t o = t * 16 + c;
          if (o >= L->n) break;
          const int32_t s = block[r * width + c];
          const float zp = a->zp[r0 + r];
          /* sum((x - zp) w), in wrapping int32 */
          const int32_t acc = (int32_t)((uint32_t)s - (uint32_t)(int32_t)zp * (uint32_t)L->wsum[o]);
          const float v = fmaf((float)acc * a->xs[r0 + r], L->scale[o], L->bias[o]);
          a->out[(r0 + r) * a->out_stride + o] = clamp_x86(v, L->out_min, L->out_max);
        }
    }
  }
}

void pn_q8_run(const pn_q8* L, int64_t rows, const int8_t* x, int64_t x_stride, const float* zero_point,
               const float* scale, float* out, int64_t out_stride, int threads) {
  if (rows <= 0) return;
  const int64_t per = pn_tiles_per_task(L->tiles, 16, rows, L->k, threads);
  const int64_t tasks = (L->tiles + per - 1) / per;
  if (L->isa != PN_AVX512VNNI) {
    q8_args a = {L, rows, x_stride, out_stride, per, x, NULL, zero_point, scale, out};
    pn_parallel(q8_task, &a, tasks, threads);
    return;
  }
  /* The rows' sums, on the stack: rows in groups that fit it */
  int32_t xsum[XSUM_ROWS];
  for (int64_t r0 = 0; r0 < rows; r0 += XSUM_ROWS) {
    const int64_t n = rows - r0 < XSUM_ROWS ? rows - r0 : XSUM_ROWS;
    pn_block_sums(x + r0 * x_stride, x_stride, n, 1, L->k, xsum);
    q8_args a = {L, n, x_stride, out_stride, per, x + r0 * x_stride, xsum, zero_point + r0, scale + r0,
                 out + r0 * out_stride};
    pn_parallel(q8_task, &a, tasks, threads);
  }
}
