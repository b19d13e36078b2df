/* Fully connected layers with 4-bit weights in blocks along the inputs, times rows quantized at run time
 * (XNNPACK's qd8_f32_qb4w GEMM, the 8da4w layers of LLM exports).
 *
 * Per output XNNPACK starts from the row's zero point times a float32 value packed with the weights (`start`),
 * adds each block's exact int32 sum times the block's scale with a fused multiply-add, block after block, then
 * applies the row's scale and the bias. Its two x86 families differ in how:
 *
 *   avx512vnni: one running sum; then times the row's scale, plus the bias (two roundings).
 *   avx2:       four running sums, lane j taking the inputs k with (k % 8) / 2 == j (its vpmaddwd pairs), the
 *               start value in lane 0; then (l0 + l1) + (l2 + l3), and fma(sum, row scale, bias).
 *
 * Then both clamp as x86's maxps/minps do: max(v, lo) is lo for a NaN v, and min(v, hi) is hi.
 *
 * Weights are kept as 4 bits. The SIMD kernels use XNNPACK's trick: a nibble shifted into the high half of a
 * byte is 16 times the weight as an int8, so products are 16 times too, and scales are divided by 16
 * (exact: a power of two). The SIMD layouts keep them as the bfloat16 values they are: what a decode step
 * reads besides the weights is 2 bytes per block and output, not 4. Block sums are integers below 2^24 in
 * magnitude, so float32(sum) is exact, and its product with a scale (8 significant bits) is exact for blocks
 * of up to 256 inputs: the fused multiply-add rounds once, as XNNPACK's does.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "native.h"

/* the avx512vnni kernel's row block sums, on the stack: 64 KiB, 256 rows of 2048 inputs in blocks of 32 */
#define XSUM_ENTRIES 16384

#if defined(__x86_64__)
#include <immintrin.h>
#endif

struct pn_qb4w {
  int isa, family;
  int64_t n, k, block, blocks;
  int64_t tile;      /* outputs per tile of the packed layout (16, 8, or 1 for the portable one) */
  int64_t tiles;     /* ceil(n / tile) */
  uint8_t* weights;  /* layout per ISA (see the packers) */
  float* scales;     /* portable: [n][blocks] block scales */
  uint16_t* scales16; /* SIMD ISAs: [tiles][blocks][tile] block scales as bfloat16 (their bits: exact) */
  float* start;      /* [tiles * tile] */
  float* bias;       /* [tiles * tile], zeros without one */
  float out_min, out_max;
};

static inline float clamp_x86(float v, float lo, float hi) {
  v = v > lo ? v : lo;
  return v < hi ? v : hi;
}

/* The weight of output o at input i, from the caller's layout: nibbles stored plus 8. */
static inline int weight_at(const uint8_t* w, int64_t row_bytes, int64_t o, int64_t i) {
  uint8_t byte = w[o * row_bytes + (i >> 1)];
  return (int)((i & 1) ? (byte >> 4) : (byte & 0xF)) - 8;
}

/* XNNPACK's start value of each output: -sum(weight * scale) in float32, chunk by chunk of `chunk` inputs in order
 * (each chunk's integer sum times its block's scale, subtracted with one rounding a step). Chunks of 16 sum their
 * 8 bytes' nibbles at once: each byte's pair at most 30, the eight at most 240, within a byte. */
void pn_qb4w_start_sums(int64_t n, int64_t k, int64_t block, int64_t chunk, const uint8_t* weights,
                        const float* scales, float* start) {
  const int64_t row_bytes = (k + 1) / 2, blocks = k / block, chunks = k / chunk;
  const uint64_t low = UINT64_C(0x0F0F0F0F0F0F0F0F), ones = UINT64_C(0x0101010101010101);
  for (int64_t o = 0; o < n; o++) {
    const uint8_t* row = weights + o * row_bytes;
    const float* so = scales + o * blocks;
    float s = 0.0f;
    for (int64_t c = 0; c < chunks; c++) {
      int32_t total;
      if (chunk == 16) {
        uint64_t bytes;
        memcpy(&bytes, row + c * 8, 8);
        const uint64_t pairs = (bytes & low) + ((bytes >> 4) & low);
        total = (int32_t)((pairs * ones) >> 56) - 8 * 16;
      } else {
        total = 0;
        for (int64_t i = c * chunk; i < (c + 1) * chunk; i++) total += weight_at(weights, row_bytes, o, i);
      }
      s = s - (float)total * so[c * chunk / block];
    }
    start[o] = s;
  }
}

/* -- portable: every family, one output at a time ---------------------------------------------------------- */

static void portable_row(const pn_qb4w* L, const int8_t* x, float zp, float xs, float* out, int64_t o0, int64_t o1) {
  const int8_t* w = (const int8_t*)L->weights; /* [n][k], one weight per byte */
  for (int64_t o = o0; o < o1; o++) {
    const int8_t* wo = w + o * L->k;
    const float* so = L->scales + o * L->blocks;
    float v;
    if (L->family == PN_FAMILY_AVX512VNNI) {
      float acc = L->start[o] * zp;
      for (int64_t b = 0; b < L->blocks; b++) {
        int32_t s = 0;
        for (int64_t i = b * L->block; i < (b + 1) * L->block; i++) s += (int32_t)x[i] * wo[i];
        acc = fmaf((float)s, so[b], acc);
      }
      v = acc * xs + L->bias[o];
    } else {
      float lane[4] = {L->start[o] * zp, 0.0f * zp, 0.0f * zp, 0.0f * zp};
      for (int64_t b = 0; b < L->blocks; b++) {
        int32_t s[4] = {0, 0, 0, 0};
        for (int64_t i = b * L->block; i < (b + 1) * L->block; i++) s[(i & 7) >> 1] += (int32_t)x[i] * wo[i];
        for (int j = 0; j < 4; j++) lane[j] = fmaf((float)s[j], so[b], lane[j]);
      }
      v = fmaf((lane[0] + lane[1]) + (lane[2] + lane[3]), xs, L->bias[o]);
    }
    out[o] = clamp_x86(v, L->out_min, L->out_max);
  }
}

static int pack_portable(pn_qb4w* L, const uint8_t* w, const float* scales) {
  const int64_t row_bytes = (L->k + 1) / 2;
  int8_t* packed = malloc((size_t)(L->n * L->k));
  L->scales = malloc(sizeof(float) * (size_t)(L->n * L->blocks));
  if (!packed || !L->scales) {
    free(packed);
    return 0;
  }
  for (int64_t o = 0; o < L->n; o++)
    for (int64_t i = 0; i < L->k; i++) packed[o * L->k + i] = (int8_t)weight_at(w, row_bytes, o, i);
  memcpy(L->scales, scales, sizeof(float) * (size_t)(L->n * L->blocks));
  L->weights = (uint8_t*)packed;
  return 1;
}

#if defined(__x86_64__)

/* -- avx512vnni ISA, avx512vnni family: XNNPACK's 16 outputs by 8 inputs (c8) with vpdpbusd ------------------ *
 * Per tile, block and chunk of 16 inputs: 128 bytes, 64 for the outputs 0..7 of the tile and 64 for 8..15; in
 * each half byte 8c + i holds in its low nibble the weight of output c at input i of the chunk, in its high
 * nibble that of input i + 8, each nibble the weight plus 8. A vpdpbusd of 8 outputs' 8 weights (its unsigned
 * operand: 16 (w + 8), the nibble in a byte's high half) with 8 activations (broadcast, signed) gives each output
 * two lanes (inputs 0..3 and 4..7), added at the end of the block: 16 sum(x w) + 128 sum(x), and the row's
 * 128 sum(x) over the block, computed once per call for every output, is taken back. XNNPACK flips the
 * activations to unsigned instead and takes back each output's weight sum, which it must then keep per block
 * and output; both give the same int32, and the weights read per step are 10% fewer this way. */

#define VNNI_ROWS 8

__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))
static inline __m512i vnni_pairs(__m512i a, __m512i b) {
  /* lanes 2c and 2c + 1 of a and b (output c of each) added: the 16 outputs' sums, a's eight then b's */
  const __m512i index = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
  const __m512i sa = _mm512_add_epi32(a, _mm512_srli_epi64(a, 32));
  const __m512i sb = _mm512_add_epi32(b, _mm512_srli_epi64(b, 32));
  return _mm512_permutex2var_epi32(sa, index, sb);
}

/* NR rows of one tile: inlined with NR a constant, so no lane works for a row that is not there */
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"), always_inline))
static inline void vnni_rows(const pn_qb4w* L, int64_t t, const int NR, const int8_t* x, int64_t x_stride,
                             const int32_t* xsum, const float* zp, const float* xs, float* out, int64_t out_stride) {
  const __m512i mask = _mm512_set1_epi8((char)0xF0);
  const int64_t chunks = L->block / 16;
  const uint8_t* wp = L->weights + t * L->blocks * chunks * 128;
  const uint16_t* tile_s = L->scales16 + t * L->blocks * 16;
  const __m512 sixteenth = _mm512_set1_ps(0.0625f);
  const int64_t o0 = t * 16;
  const int64_t valid = L->n - o0 < 16 ? L->n - o0 : 16;
  __m512 acc[VNNI_ROWS];
  const __m512 start = _mm512_loadu_ps(L->start + o0);
  for (int r = 0; r < NR; r++) acc[r] = _mm512_mul_ps(start, _mm512_set1_ps(zp[r]));
  for (int64_t b = 0; b < L->blocks; b++) {
    /* outputs 0..7 and 8..15, two lanes each. With few rows each dpbusd would wait for the one before it on the
     * same register (a latency of 5 cycles, 2 of 4 a chunk): the high nibbles then sum apart, added at the end
     * of the block (int32: the same sums in any order). With more rows the rows' chains overlap. */
    __m512i a[VNNI_ROWS], c[VNNI_ROWS], ah[VNNI_ROWS], ch8[VNNI_ROWS];
    const int apart = NR <= 2;
    for (int r = 0; r < NR; r++) a[r] = c[r] = ah[r] = ch8[r] = _mm512_setzero_si512();
    const int8_t* xb = x + b * L->block;
    for (int64_t ch = 0; ch < chunks; ch++, wp += 128, xb += 16) {
      _mm_prefetch((const char*)wp + PN_PREFETCH_AHEAD, _MM_HINT_T0);
      _mm_prefetch((const char*)wp + PN_PREFETCH_AHEAD + 64, _MM_HINT_T0);
      const __m512i v0 = _mm512_loadu_si512(wp), v8 = _mm512_loadu_si512(wp + 64);
      const __m512i w0lo = _mm512_and_si512(_mm512_slli_epi16(v0, 4), mask), w0hi = _mm512_and_si512(v0, mask);
      const __m512i w8lo = _mm512_and_si512(_mm512_slli_epi16(v8, 4), mask), w8hi = _mm512_and_si512(v8, mask);
      for (int r = 0; r < NR; r++) {
        int64_t first, second;
        memcpy(&first, xb + r * x_stride, 8);
        memcpy(&second, xb + r * x_stride + 8, 8);
        const __m512i x0 = _mm512_set1_epi64(first), x8 = _mm512_set1_epi64(second);
        PN_DPBUSD(a[r], w0lo, x0);
        PN_DPBUSD(c[r], w8lo, x0);
        if (apart) {
          PN_DPBUSD(ah[r], w0hi, x8);
          PN_DPBUSD(ch8[r], w8hi, x8);
        } else {
          PN_DPBUSD(a[r], w0hi, x8);
          PN_DPBUSD(c[r], w8hi, x8);
        }
      }
    }
    if (apart)
      for (int r = 0; r < NR; r++) a[r] = _mm512_add_epi32(a[r], ah[r]), c[r] = _mm512_add_epi32(c[r], ch8[r]);
    /* the scale / 16: a bfloat16 widened exactly, times a power of two (the one rounding of scale / 16) */
    const __m512 scale = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(
        _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)(tile_s + b * 16))), 16)), sixteenth);
    for (int r = 0; r < NR; r++) {
      /* 128 sum(x) of the row's block: the weights' + 8, times the 16 of the high nibble */
      const __m512i correction = _mm512_set1_epi32(xsum[r * L->blocks + b] * 128);
      const __m512i sum = _mm512_sub_epi32(vnni_pairs(a[r], c[r]), correction);
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), scale, acc[r]);
    }
  }
  const __m512 bias = _mm512_loadu_ps(L->bias + o0);
  const __m512 lo = _mm512_set1_ps(L->out_min), hi = _mm512_set1_ps(L->out_max);
  const __mmask16 store = (__mmask16)((1u << valid) - 1);
  for (int r = 0; r < NR; r++) {
    __m512 v = _mm512_add_ps(_mm512_mul_ps(acc[r], _mm512_set1_ps(xs[r])), bias);
    v = _mm512_min_ps(_mm512_max_ps(v, lo), hi);
    _mm512_mask_storeu_ps(out + r * out_stride + o0, store, v);
  }
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni")))
static void vnni_tile(const pn_qb4w* L, int64_t t, int64_t rows, const int8_t* x, int64_t x_stride,
                      const int32_t* xsum, const float* zp, const float* xs, float* out, int64_t out_stride) {
  for (int64_t r0 = 0; r0 < rows; r0 += VNNI_ROWS) {
    const int8_t* xr = x + r0 * x_stride;
    const int32_t* sr = xsum + r0 * L->blocks;
    float* o = out + r0 * out_stride;
    switch (rows - r0 < VNNI_ROWS ? rows - r0 : VNNI_ROWS) {
      case 1: vnni_rows(L, t, 1, xr, x_stride, sr, zp + r0, xs + r0, o, out_stride); break;
      case 2: vnni_rows(L, t, 2, xr, x_stride, sr, zp + r0, xs + r0, o, out_stride); break;
      case 3: vnni_rows(L, t, 3, xr, x_stride, sr, zp + r0, xs + r0, o, out_stride); break;
      case 4: vnni_rows(L, t, 4, xr, x_stride, sr, zp + r0, xs + r0, o, out_stride); break;
      case 5: vnni_rows(L, t, 5, xr, x_stride, sr, zp + r0, xs + r0, o, out_stride); break;
      case 6: vnni_rows(L, t, 6, xr, x_stride, sr, zp + r0, xs + r0, o, out_stride); break;
      case 7: vnni_rows(L, t, 7, xr, x_stride, sr, zp + r0, xs + r0, o, out_stride); break;
      default: vnni_rows(L, t, 8, xr, x_stride, sr, zp + r0, xs + r0, o, out_stride); break;
    }
  }
}

/* A chunk's 16 nibbles (8 bytes of the caller's layout, stored plus 8, k even) as the avx512vnni layout holds one
 * output's: byte i the nibble of input i low, of input i + 8 high. BMI2's pdep puts eight nibbles in the low
 * halves of eight bytes at once; every CPU with AVX-512 VNNI has BMI2. */
__attribute__((target("bmi2")))
static void spread_chunk(const uint8_t* src, uint8_t* dst) {
  const uint64_t halves = UINT64_C(0x0F0F0F0F0F0F0F0F);
  uint32_t first, second;
  memcpy(&first, src, 4);
  memcpy(&second, src + 4, 4);
  const uint64_t v = _pdep_u64(first, halves) | (_pdep_u64(second, halves) << 4);
  memcpy(dst, &v, 8);
}

/* Whether every block scale is a bfloat16, as ExecuTorch writes them: the SIMD layouts keep them as 16 bits (a
 * file's float32 scales take the portable code, which keeps them whole). */
static int bf16_scales(int64_t n, int64_t k, int64_t block, const float* scales) {
  for (int64_t i = 0; i < n * (k / block); i++) {
    uint32_t bits;
    memcpy(&bits, &scales[i], 4);
    if (bits & 0xFFFF) return 0;
  }
  return 1;
}

static uint16_t bf16_bits(float scale) {
  uint32_t bits;
  memcpy(&bits, &scale, 4);
  return (uint16_t)(bits >> 16); /* exact: bf16_scales */
}

static int pack_vnni(pn_qb4w* L, const uint8_t* w, const float* scales) {
  const int64_t row_bytes = (L->k + 1) / 2, chunks = L->block / 16;
  uint8_t* packed = pn_zeroed((size_t)(L->tiles * L->blocks * chunks * 128));
  L->scales16 = pn_zeroed(sizeof(uint16_t) * (size_t)(L->tiles * L->blocks * 16));
  if (!packed || !L->scales16) {
    free(packed);
    return 0;
  }
  for (int64_t t = 0; t < L->tiles; t++)
    for (int64_t b = 0; b < L->blocks; b++) {
      for (int64_t c = 0; c < 16; c++) {
        const int64_t o = t * 16 + c;
        if (o >= L->n) continue;
        L->scales16[(t * L->blocks + b) * 16 + c] = bf16_bits(scales[o * L->blocks + b]);
      }
      for (int64_t ch = 0; ch < chunks; ch++) {
        uint8_t* dst = packed + ((t * L->blocks + b) * chunks + ch) * 128;
        for (int64_t half = 0; half < 2; half++)
          for (int64_t c = 0; c < 8; c++) {
            const int64_t o = t * 16 + 8 * half + c, k = b * L->block + 16 * ch;
            if (o < L->n)
              spread_chunk(w + o * row_bytes + k / 2, dst + 64 * half + 8 * c);
            else
              memset(dst + 64 * half + 8 * c, 0x88, 8); /* zeros, stored plus 8 */
          }
      }
    }
  L->weights = packed;
  return 1;
}

/* -- avx2 ISA, avx2 family: XNNPACK's 8 outputs by 8 inputs (c8) with vpmaddwd --------------------------------- *
 * Per tile, block and chunk of 16 inputs: 64 bytes; for the pair p of outputs (2p, 2p + 1), 16 bytes, byte 8c + i
 * holding in its low nibble the weight of output 2p + c at input i of the chunk, in its high nibble that of input
 * i + 8. Each vpmaddwd of 8 activations (widened to int16) with two outputs' 8 weights gives each output's four
 * lanes their pair of products. */

#define AVX2_ROWS 3

__attribute__((target("avx2,fma"), always_inline))
static inline void avx2_rows(const pn_qb4w* L, int64_t t, const int NR, const int8_t* x, int64_t x_stride,
                             const float* zp, const float* xs, float* out, int64_t out_stride) {
  const __m128i mask = _mm_set1_epi8((char)0xF0);
  const int64_t chunks = L->block / 16;
  const uint8_t* wp = L->weights + t * L->blocks * chunks * 64;
  const uint16_t* tile_s = L->scales16 + t * L->blocks * 8;
  const int64_t o0 = t * 8;
  const int64_t valid = L->n - o0 < 8 ? L->n - o0 : 8;
  __m256 acc[AVX2_ROWS][4];
  for (int p = 0; p < 4; p++) {
    /* the start value in lane 0 of each output's four: [s0, 0, 0, 0, s1, 0, 0, 0] for the pair (0, 1), ... */
    const float* s = L->start + o0 + 2 * p;
    const __m256 init = _mm256_setr_ps(s[0], 0.0f, 0.0f, 0.0f, s[1], 0.0f, 0.0f, 0.0f);
    for (int r = 0; r < NR; r++) acc[r][p] = _mm256_mul_ps(init, _mm256_set1_ps(zp[r]));
  }
  for (int64_t b = 0; b < L->blocks; b++) {
    __m256i sum[AVX2_ROWS][4];
    for (int r = 0; r < NR; r++)
      for (int p = 0; p < 4; p++) sum[r][p] = _mm256_setzero_si256();
    const int8_t* xb = x + b * L->block;
    for (int64_t c = 0; c < chunks; c++, wp += 64, xb += 16) {
      _mm_prefetch((const char*)wp + PN_PREFETCH_AHEAD, _MM_HINT_T0);
      __m256i xlo[AVX2_ROWS], xhi[AVX2_ROWS];
      for (int r = 0; r < NR; r++) {
        const int8_t* a = xb + r * x_stride;
        xlo[r] = _mm256_cvtepi8_epi16(_mm_broadcastq_epi64(_mm_loadl_epi64((const __m128i*)a)));
        xhi[r] = _mm256_cvtepi8_epi16(_mm_broadcastq_epi64(_mm_loadl_epi64((const __m128i*)(a + 8))));
      }
      for (int p = 0; p < 4; p++) {
        const __m128i v = _mm_loadu_si128((const __m128i*)(wp + 16 * p));
        const __m256i wl = _mm256_cvtepi8_epi16(_mm_and_si128(_mm_slli_epi32(v, 4), mask));
        const __m256i wh = _mm256_cvtepi8_epi16(_mm_and_si128(v, mask));
        for (int r = 0; r < NR; r++) {
          sum[r][p] = _mm256_add_epi32(sum[r][p], _mm256_madd_epi16(xlo[r], wl));
          sum[r][p] = _mm256_add_epi32(sum[r][p], _mm256_madd_epi16(xhi[r], wh));
        }
      }
    }
    float s[8]; /* the block's scales / 16: bfloat16s widened exactly, times a power of two */
    for (int c = 0; c < 8; c++) {
      const uint32_t bits = (uint32_t)tile_s[b * 8 + c] << 16;
      memcpy(&s[c], &bits, 4);
      s[c] *= 0.0625f;
    }
    for (int p = 0; p < 4; p++) {
      const __m256 scale = _mm256_setr_ps(s[2 * p], s[2 * p], s[2 * p], s[2 * p], s[2 * p + 1], s[2 * p + 1],
                                          s[2 * p + 1], s[2 * p + 1]);
      for (int r = 0; r < NR; r++) acc[r][p] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum[r][p]), scale, acc[r][p]);
    }
  }
  const __m256 bias = _mm256_loadu_ps(L->bias + o0);
  const __m256 lo = _mm256_set1_ps(L->out_min), hi = _mm256_set1_ps(L->out_max);
  const __m256i order = _mm256_set_epi32(7, 3, 6, 2, 5, 1, 4, 0);
  for (int r = 0; r < NR; r++) {
    const __m256 h0213 = _mm256_hadd_ps(acc[r][0], acc[r][1]);
    const __m256 h4657 = _mm256_hadd_ps(acc[r][2], acc[r][3]);
    __m256 v = _mm256_permutevar8x32_ps(_mm256_hadd_ps(h0213, h4657), order);
    v = _mm256_fmadd_ps(v, _mm256_set1_ps(xs[r]), bias);
    v = _mm256_min_ps(_mm256_max_ps(v, lo), hi);
    float* dst = out + r * out_stride + o0;
    if (valid == 8) {
      _mm256_storeu_ps(dst, v);
    } else {
      float lanes[8];
      _mm256_storeu_ps(lanes, v);
      memcpy(dst, lanes, sizeof(float) * (size_t)valid);
    }
  }
}

__attribute__((target("avx2,fma")))
static void avx2_tile(const pn_qb4w* L, int64_t t, int64_t rows, const int8_t* x, int64_t x_stride, const float* zp,
                      const float* xs, float* out, int64_t out_stride) {
  for (int64_t r0 = 0; r0 < rows; r0 += AVX2_ROWS) {
    const int8_t* xr = x + r0 * x_stride;
    float* o = out + r0 * out_stride;
    switch (rows - r0 < AVX2_ROWS ? rows - r0 : AVX2_ROWS) {
      case 1: avx2_rows(L, t, 1, xr, x_stride, zp + r0, xs + r0, o, out_stride); break;
      case 2: avx2_rows(L, t, 2, xr, x_stride, zp + r0, xs + r0, o, out_stride); break;
      default: avx2_rows(L, t, 3, xr, x_stride, zp + r0, xs + r0, o, out_stride); break;
    }
  }
}

static int pack_avx2(pn_qb4w* L, const uint8_t* w, const float* scales) {
  const int64_t row_bytes = (L->k + 1) / 2, chunks = L->block / 16;
  uint8_t* packed = pn_zeroed((size_t)(L->tiles * L->blocks * chunks * 64));
  L->scales16 = pn_zeroed(sizeof(uint16_t) * (size_t)(L->tiles * L->blocks * 8));
  if (!packed || !L->scales16) {
    free(packed);
    return 0;
  }
  for (int64_t t = 0; t < L->tiles; t++)
    for (int64_t b = 0; b < L->blocks; b++) {
      for (int64_t c = 0; c < 8; c++) {
        const int64_t o = t * 8 + c;
        if (o < L->n) L->scales16[(t * L->blocks + b) * 8 + c] = bf16_bits(scales[o * L->blocks + b]);
      }
      for (int64_t ch = 0; ch < chunks; ch++) {
        uint8_t* dst = packed + ((t * L->blocks + b) * chunks + ch) * 64;
        for (int64_t p = 0; p < 4; p++)
          for (int64_t c = 0; c < 2; c++)
            for (int64_t i = 0; i < 8; i++) {
              const int64_t o = t * 8 + 2 * p + c, k = b * L->block + 16 * ch + i;
              const int lo = o < L->n ? weight_at(w, row_bytes, o, k) : 0;
              const int hi = o < L->n ? weight_at(w, row_bytes, o, k + 8) : 0;
              dst[16 * p + 8 * c + i] = (uint8_t)((lo & 0xF) | ((hi & 0xF) << 4));
            }
      }
    }
  L->weights = packed;
  return 1;
}

#endif /* __x86_64__ */

/* -- the layer -------------------------------------------------------------------------------------------- */

pn_qb4w* pn_qb4w_pack(int isa, int family, int64_t n, int64_t k, int64_t block, const uint8_t* weights,
                      const float* scales, const float* start, const float* bias, float out_min, float out_max) {
  if (n <= 0 || k <= 0 || block <= 0 || block % 32 || k % block) return NULL;
  pn_qb4w* L = calloc(1, sizeof(pn_qb4w));
  if (!L) return NULL;
  L->family = family;
  L->n = n;
  L->k = k;
  L->block = block;
  L->blocks = k / block;
  L->out_min = out_min;
  L->out_max = out_max;
  /* an ISA runs the family XNNPACK runs on CPUs that have it; any other pairing is the portable code's */
#if defined(__x86_64__)
  const int simd = bf16_scales(n, k, block, scales);
  /* the avx512vnni kernel keeps a row's block sums on the stack (XSUM_ENTRIES blocks at most), and its int32
   * lanes hold a block's 16 (w + 8) x products for blocks of up to 4096 inputs with room to spare */
  if (isa == PN_AVX512VNNI && family == PN_FAMILY_AVX512VNNI && simd && L->blocks <= XSUM_ENTRIES && block <= 4096)
    L->isa = PN_AVX512VNNI, L->tile = 16;
  else if (isa >= PN_AVX2 && family == PN_FAMILY_AVX2 && simd) L->isa = PN_AVX2, L->tile = 8;
  else
#endif
    L->isa = PN_PORTABLE, L->tile = 1;
  L->tiles = (n + L->tile - 1) / L->tile;
  const size_t padded = (size_t)(L->tiles * L->tile);
  L->start = calloc(padded, sizeof(float));
  L->bias = calloc(padded, sizeof(float));
  int packed = L->start && L->bias;
  if (packed) {
    memcpy(L->start, start, sizeof(float) * (size_t)n);
    if (bias) memcpy(L->bias, bias, sizeof(float) * (size_t)n);
#if defined(__x86_64__)
    if (L->isa == PN_AVX512VNNI) packed = pack_vnni(L, weights, scales);
    else if (L->isa == PN_AVX2) packed = pack_avx2(L, weights, scales);
    else
#endif
      packed = pack_portable(L, weights, scales);
  }
  if (!packed) {
    pn_qb4w_free(L);
    return NULL;
  }
  return L;
}

void pn_qb4w_free(pn_qb4w* L) {
  if (!L) return;
  free(L->weights);
  free(L->scales);
  free(L->scales16);
  free(L->start);
  free(L->bias);
  free(L);
}

int pn_qb4w_isa(const pn_qb4w* L) { return L->isa; }

typedef struct {
  const pn_qb4w* L;
  int64_t rows, x_stride, out_stride, tiles_per_task;
  const int8_t* x;
  const int32_t* xsum; /* avx512vnni: [rows][blocks] each row's sum over each block */
  const float *zp, *xs;
  float* out;
} run_args;

static void run_task(void* ctx, int64_t task) {
  const run_args* a = ctx;
  const pn_qb4w* L = a->L;
  const int64_t t0 = task * a->tiles_per_task;
  const int64_t t1 = t0 + a->tiles_per_task < L->tiles ? t0 + a->tiles_per_task : L->tiles;
#if defined(__x86_64__)
  if (L->isa == PN_AVX512VNNI) {
    for (int64_t t = t0; t < t1; t++)
      vnni_tile(L, t, a->rows, a->x, a->x_stride, a->xsum, a->zp, a->xs, a->out, a->out_stride);
    return;
  }
  if (L->isa == PN_AVX2) {
    for (int64_t t = t0; t < t1; t++) avx2_tile(L, t, a->rows, a->x, a->x_stride, a->zp, a->xs, a->out, a->out_stride);
    return;
  }
#endif
  for (int64_t r = 0; r < a->rows; r++)
    portable_row(L, a->x + r * a->x_stride, a->zp[r], a->xs[r], a->out + r * a->out_stride, t0, t1);
}

void pn_qb4w_run(const pn_qb4w* L, int64_t rows, const int8_t* x, int64_t x_stride, const float* zero_point,
                 const float* scale, float* out, int64_t out_stride, int threads) {
  if (rows <= 0) return;
  const int64_t per = pn_tiles_per_task(L->tiles, L->tile, rows, L->k, threads);
  const int64_t tasks = (L->tiles + per - 1) / per;
  if (L->isa != PN_AVX512VNNI) {
    run_args a = {L, rows, x_stride, out_stride, per, x, NULL, zero_point, scale, out};
    pn_parallel(run_task, &a, tasks, threads);
    return;
  }
  /* The rows' block sums, on the stack: rows in groups that fit it (a long prompt's rows, a few groups) */
  int32_t xsum[XSUM_ENTRIES];
  const int64_t group = XSUM_ENTRIES / L->blocks >= rows ? rows : XSUM_ENTRIES / L->blocks;
  for (int64_t r0 = 0; r0 < rows; r0 += group) {
    const int64_t n = rows - r0 < group ? rows - r0 : group;
    pn_block_sums(x + r0 * x_stride, x_stride, n, L->blocks, L->block, xsum);
    run_args a = {L, n, x_stride, out_stride, per, x + r0 * x_stride, xsum, zero_point + r0, scale + r0,
                  out + r0 * out_stride};
    pn_parallel(run_task, &a, tasks, threads);
  }
}
