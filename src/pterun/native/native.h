/* pterun's native kernels: the C side of a small ABI. XNNPACK's arithmetic (quantized products, float elementwise
 * kernels) for the XNNPACK delegate, and ExecuTorch's float32 attention over a KV cache (sdpa.c).
 *
 * Each XNNPACK kernel repeats, for every output, the steps of the XNNPACK kernel ExecuTorch's runtime runs on the CPU in
 * question (its "family"), in XNNPACK's order: integer sums are exact in any order, and the float steps after
 * them are the same operations (fused multiply-adds where XNNPACK fuses). So outputs are XNNPACK's bit for bit.
 * The instruction set an implementation uses (ISA) only changes speed; an ISA implements the family XNNPACK runs
 * on CPUs that have it, and the portable C implementation runs every family.
 *
 * Floating point here must not be contracted: the extension is built with -ffp-contract=off, and every fused
 * multiply-add is written as one (fmaf, _mm*_fmadd_ps).
 */
#ifndef PTERUN_NATIVE_H
#define PTERUN_NATIVE_H

#include <stddef.h>
#include <stdint.h>

enum pn_isa { PN_PORTABLE = 0, PN_AVX2 = 1, PN_AVX512VNNI = 2 };
/* XNNPACK's qd8_f32_qb4w kernel families (backends/xnnpack/nodes/isa.py names them). */
enum pn_family { PN_FAMILY_AVX512VNNI = 0, PN_FAMILY_AVX2 = 1 };

/* The best ISA this CPU runs (cpuid), and a name for it. */
int pn_cpu_isa(void);
const char* pn_isa_name(int isa);

/* Runs task(ctx, i) for i in [0, count) on up to `threads` threads (the caller's among them), returning when all
 * are done: on PyTorch's OpenMP team where the process has one, else on workers started on first use that sleep
 * between calls. */
typedef void (*pn_task)(void* ctx, int64_t index);
void pn_parallel(pn_task task, void* ctx, int64_t count, int threads);
/* pn_parallel on workers of its own even where PyTorch's OpenMP team is there: for tasks that call PyTorch's
 * BLAS, which chooses its own threads for a call from outside an OpenMP region as it does for ExecuTorch's
 * pthreadpool workers, and runs a call from inside one on that thread alone (sums split differently). */
void pn_parallel_apart(pn_task task, void* ctx, int64_t count, int threads);
/* Whether pn_parallel runs on PyTorch's OpenMP team (1) or on workers of its own (0). */
int pn_parallel_team(void);
/* Tiles of `tile` outputs per task of a product over `rows` rows of k inputs: enough tasks to balance `threads`,
 * each of 2^20 multiply-adds at least (at one row, a decode step, that is tens of microseconds of reading weights,
 * about what waking a worker costs on a loaded or virtual machine, so a smaller layer runs on the calling thread
 * alone); all tiles in one task at one thread. */
int64_t pn_tiles_per_task(int64_t tiles, int64_t tile, int64_t rows, int64_t k, int threads);
/* sums[r][b]: the sum of row r's block b (`blocks` blocks of `block` int8 values from the row's start), for `rows`
 * rows `x_stride` apart. */
void pn_block_sums(const int8_t* x, int64_t x_stride, int64_t rows, int64_t blocks, int64_t block, int32_t* sums);

/* `bytes` of zeros aligned to a cache line, or NULL; freed with free(). Packed weights take it: the kernels read
 * them 64 bytes at a time, and calloc's 16-byte alignment (mmap's page plus its header, for large blocks) would
 * split every such load over two cache lines. */
void* pn_zeroed(size_t bytes);

/* How far ahead of its reads a product kernel asks for packed weights (bytes; a prefetch per cache line read).
 * A decode step's products stream weights that are not in cache, one tile's bytes after the next, and the
 * hardware's prefetchers stop at every 4 KiB page: asking 3 KiB ahead took the products of a 1B-parameter
 * 8da4w decode step from 68 to 48-53 ms at one thread (AVX-512 VNNI Xeon; 39 to 28 ms at two), the same
 * 2-8 KiB ahead; huge pages for the packed weights added nothing. A prefetch never faults, past the end of the
 * weights too. */
#define PN_PREFETCH_AHEAD 3072

/* acc += the products of u's unsigned bytes and s's signed ones, four to each 32-bit lane (vpdpbusd, AVX-512 VNNI;
 * _mm512_dpbusd_epi32(acc, u, s)). Written as the instruction: where accumulators live in zmm16-31, GCC 12 copies
 * the intrinsic's accumulator into a register of its own and back on every call, two moves per product (the
 * 8-bit products of 32 rows by 512 x 2048 x 512 took 0.54 ms with them, on an AVX-512 EPYC, 0.42 without). The
 * accumulator goes through a local value: an array's element handed to the asm itself kept the whole array on
 * the stack. */
#if defined(__x86_64__)
#define PN_DPBUSD(acc, u, s)                                               \
  do {                                                                     \
    __m512i pn_acc_ = (acc);                                               \
    __asm__("vpdpbusd %2, %1, %0" : "+v"(pn_acc_) : "v"(u), "v"(s));         \
    (acc) = pn_acc_;                                                       \
  } while (0)
#endif

/* XNNPACK's dynamic quantization (qd8) of `rows` float rows of `cols` values: per row the range widened to hold 0,
 * scale 255 / range, the nudged zero point; each value min(x * scale, 32767) rounded half to even, plus the zero
 * point, saturated to int8. Writes the int8 rows, each row's zero point and its dequantization scale (1 / scale),
 * both as floats. */
void pn_quantize_rows(int isa, const float* x, int64_t rows, int64_t cols, int64_t x_stride, int8_t* q,
                      int64_t q_stride, float* zero_point, float* scale);

/* XNNPACK's converts of n values between float32 and signed 8-bit ones of one scale and zero point (convert.c):
 * quantize takes 1 / scale (as XNNPACK computes it in float32), dequantize the scale. */
/* pn_quantize_s8 on the calling thread alone. */
void pn_quantize_s8_row(int isa, const float* x, int8_t* y, int64_t n, float inverse_scale, int32_t zero_point);
void pn_quantize_s8(int isa, const float* x, int8_t* y, int64_t n, float inverse_scale, int32_t zero_point,
                    int threads);
void pn_dequantize_s8(int isa, const int8_t* x, float* y, int64_t n, int32_t zero_point, float scale, int threads);
/* y[i] = table[(uint8_t)x[i]] for n signed 8-bit values (table: 256 of them, indexed by the byte). */
void pn_lookup_s8(int isa, const int8_t* table, const int8_t* x, int8_t* y, int64_t n, int threads);

/* A fully connected layer with 4-bit weights in blocks along the inputs (qd8_f32_qb4w), packed for one ISA. */
typedef struct pn_qb4w pn_qb4w;

/* Packs weights given as bytes [n, ceil(k / 2)] (element 2i in the low nibble, 2i + 1 in the high one, each
 * stored plus 8), float32 block scales [n, k / block], XNNPACK's packed start values [n], an optional float32
 * bias [n] and the output's clamp. Returns NULL when memory runs out, or when block is not a multiple of 32 or
 * does not divide k. */
/* XNNPACK's start values of a 4-bit layer (the `start` pn_qb4w_pack takes): per output, -sum(weight * scale) in
 * float32, chunk by chunk of `chunk` inputs (16, or the block) in order, from the caller's layout (n rows of
 * ceil(k / 2) bytes, nibbles stored plus 8) and float32 block scales [n][k / block]. */
void pn_qb4w_start_sums(int64_t n, int64_t k, int64_t block, int64_t chunk, const uint8_t* weights,
                        const float* scales, float* start);
pn_qb4w* pn_qb4w_pack(int isa, int family, int64_t n, int64_t k, int64_t block, const uint8_t* weights,
                      const float* scales, const float* start, const float* bias, float out_min, float out_max);
void pn_qb4w_free(pn_qb4w* layer);
int pn_qb4w_isa(const pn_qb4w* layer);
/* out [rows, n] (row stride out_stride) from int8 rows x [rows, k] (row stride x_stride) with their float zero
 * points and dequantization scales. */
void pn_qb4w_run(const pn_qb4w* layer, int64_t rows, const int8_t* x, int64_t x_stride, const float* zero_point,
                 const float* scale, float* out, int64_t out_stride, int threads);

/* A fully connected layer with int8 weights [n, k] (row stride w_stride), one scale per output channel, on
 * rows quantized at run time (qd8_f32_qc8w): channel scales, a float bias or NULL, the clamp. */
typedef struct pn_q8 pn_q8;
pn_q8* pn_q8_pack(int isa, int64_t n, int64_t k, const int8_t* weights, int64_t w_stride, const float* scale,
                  const float* bias, float out_min, float out_max);
void pn_q8_free(pn_q8* layer);
int pn_q8_isa(const pn_q8* layer);
/* out [rows, n] floats from int8 rows x with each row's zero point and scale. */
void pn_q8_run(const pn_q8* layer, int64_t rows, const int8_t* x, int64_t x_stride, const float* zero_point,
               const float* scale, float* out, int64_t out_stride, int threads);

/* A static 8-bit 2-d convolution on NHWC images (qconv.c): XNNPACK's qs8 / qs8_qc8w convolution, any groups,
 * depthwise ones (one input and one output channel per group) by a direct kernel. Weights [groups * cout_g][kh]
 * [kw][cin_g] int8, float32 requantization scales and an optional int32 bias per output channel, the input's
 * zero point, the output's and its [qmin, qmax]. The strides, dilations and top and left padding are the
 * convolution's; its output size is the caller's (oh, ow). Returns NULL when memory runs out or a size is not
 * positive. */
typedef struct pn_qconv pn_qconv;
pn_qconv* pn_qconv_pack(int isa, int64_t groups, int64_t cin_g, int64_t cout_g, int64_t kh, int64_t kw, int64_t sh,
                        int64_t sw, int64_t dh, int64_t dw, int64_t pt, int64_t pl, const int8_t* weights,
                        const float* scale, const int32_t* bias, int32_t input_zero_point,
                        int32_t out_zero_point, int32_t qmin, int32_t qmax);
void pn_qconv_free(pn_qconv* layer);
int pn_qconv_isa(const pn_qconv* layer);
/* y [n, oh, ow, groups * cout_g] from x [n, h, w, groups * cin_g], both contiguous int8. Returns -1 when a
 * thread's buffer could not be allocated (the output is then incomplete), else 0. */
int pn_qconv_run(const pn_qconv* layer, int64_t n, int64_t h, int64_t w, const int8_t* x, int64_t oh, int64_t ow,
                 int8_t* y, int threads);

/* An 8-bit addition or multiplication with requantization (qbinary.c), XNNPACK's qs8 vadd / vmul, over an
 * output of up to 6 dimensions; geometry holds the output's shape, then each operand's strides in elements
 * (0 where it is broadcast). add: a_param, b_param are XNNPACK's multipliers, bias and shift its others; mul:
 * a_param, b_param the operands' zero points, scale the product's. Returns NULL for more dimensions, an unknown
 * op, a shift outside [0, 31] or when memory runs out. */
enum pn_qop { PN_QADD = 0, PN_QMUL = 1 };
typedef struct pn_qbinary pn_qbinary;
pn_qbinary* pn_qbinary_make(int isa, int op, int ndim, const int64_t* geometry, int32_t a_param, int32_t b_param,
                            int32_t bias, int32_t shift, float scale, int32_t out_zero_point, int32_t qmin,
                            int32_t qmax);
void pn_qbinary_free(pn_qbinary* op);
int pn_qbinary_isa(const pn_qbinary* op);
/* y (the output, contiguous) from operands a and b laid out as the geometry says. */
void pn_qbinary_run(const pn_qbinary* op, const int8_t* a, const int8_t* b, int8_t* y, int threads);

/* 8-bit pooling on NHWC images (qpool.c). The global mean of each image's channels [n, h, w, c] -> [n, c]:
 * rint(float32(sum) * scale + zero), clamped to [qmin, qmax]; returns -1 when memory runs out, else 0. Max
 * pooling into [n, oh, ow, c] with window = {kh, kw, sh, sw, dh, dw, top, left}, then [qmin, qmax]. */
int pn_qmean_s8(const int8_t* x, int8_t* y, int64_t n, int64_t h, int64_t w, int64_t c, float scale, float zero,
                int32_t qmin, int32_t qmax, int threads);
void pn_qmaxpool_s8(const int8_t* x, int8_t* y, int64_t n, int64_t h, int64_t w, int64_t c, int64_t oh, int64_t ow,
                    const int64_t* window, int32_t qmin, int32_t qmax, int threads);

/* XNNPACK's float elementwise kernels (vunary.c, vsoftmax.c). A family is the set of kernels XNNPACK's runtime
 * picks on x86-64 CPUs with some features: avx512f (AVX-512F), avx2 (AVX2 and FMA3 without AVX-512F). */
enum pn_vfamily { PN_VFAMILY_AVX512F = 0, PN_VFAMILY_AVX2 = 1 };
enum pn_vop {
  PN_VOP_SIGMOID, PN_VOP_RSQRT, PN_VOP_SQRT, PN_VOP_SIN, PN_VOP_COS, PN_VOP_EXP, PN_VOP_TANH, PN_VOP_GELU,
  PN_VOP_LOG, PN_VOP_HARDSWISH, PN_VOP_ELU, PN_VOP_COUNT
};
/* XNNPACK runs every operator with denormals off (pthreadpool's PTHREADPOOL_FLAG_DISABLE_DENORMALS): denormal
 * inputs read as zero and denormal results are flushed to zero. Its float kernels' twins do the same, on the
 * thread they run on, restoring its state after. */
unsigned pn_denormals_off(void);
void pn_denormals_restore(unsigned state);
/* Whether this CPU has the instructions of a family's kernels. */
int pn_vfamily_runs(int family);
/* y[i] = op(x[i]) for n floats (param: ELU's alpha, else unused); x and y may be the same. Returns -1 (and
 * computes nothing) for an unknown op or family, or a family this CPU does not run. */
int pn_vunary(int op, int family, const float* x, float* y, int64_t n, float param, int threads);
/* Softmax of each of `rows` contiguous rows of `cols` floats; the same conditions. */
int pn_softmax(int family, const float* x, float* y, int64_t rows, int64_t cols, int threads);

/* XNNPACK's float depthwise convolution (dwconv.c): y [n, oh, ow, c] from x [n, h, w, c], weights [kh, kw, c],
 * bias [c] or NULL, strides sh, sw, dilations dh, dw, padding top and left (the window of output (oy, ox) starts
 * at input row oy * sh - top, column ox * sw - left), then [out_min, out_max]. The caller checks every size
 * against its tensors. Returns -1 (and computes nothing) for a family this CPU does not run or negative sizes. */
typedef struct {
  const float *x, *weights, *bias;
  float* y;
  int64_t n, h, w, c, kh, kw, sh, sw, dh, dw, top, left, oh, ow;
  float out_min, out_max;
} pn_dwconv;
int pn_dwconv_f32(const pn_dwconv* p, int family, int threads);

/* XNNPACK's float dense convolution and fully connected product (gemm.c): y [n, oh, ow, cout] from x [n, h, w, cin]
 * and the weights (with their bias) packed by native.py's conv_pack, kh x kw taps (at most 256), strides sh, sw,
 * dilations dh, dw, padding top and left (the window of output (oy, ox) starts at input row oy * sh - top,
 * column ox * sw - left), then [out_min, out_max]; each output's accumulator from its bias through the taps and
 * their channels in order with fused multiply-adds. A fully connected layer of `rows` rows is the 1 x 1
 * convolution of [1, rows, 1, k]. The caller checks every size against its tensors. Returns -1 (and computes
 * nothing) for a family this CPU does not run, negative sizes or a wider window, -2 when memory runs out. */
typedef struct {
  const float *x, *packed;
  float* y;
  int64_t n, h, w, cin, cout, kh, kw, sh, sw, dh, dw, top, left, oh, ow;
  float out_min, out_max;
} pn_conv;
int pn_conv_f32(const pn_conv* p, int family, int threads);

/* Elements moved without arithmetic (move.c): y[y_offset + sum(i_d * ys_d)] = x[x_offset + sum(i_d * xs_d)] for
 * every index i of `sizes`, elements of `elem` bytes (1, 2, 4 or 8), strides in elements; geometry is x_offset,
 * y_offset, then sizes, xs and ys of `ndim` (1 to PN_MOVE_DIMS) each. The regions of x and y do not overlap.
 * Returns -1 (and moves nothing) for another element size or rank. */
#define PN_MOVE_DIMS 6
int pn_copy_strided(const void* x, void* y, int elem, int ndim, const int64_t* geometry, int threads);

/* XNNPACK's float add, subtract, multiply and divide with broadcasting (move.c): each output the operation of
 * its two inputs (PN_CLAMP: a's value), then clamped to [lo, hi] as PyTorch's clamp does (a value equal to a
 * bound kept, NaN kept); geometry is sizes, a's strides, b's strides and y's strides of `ndim` each (a broadcast
 * dimension's stride is 0). Returns -1 for another op or rank. */
enum pn_binary_op { PN_ADD = 0, PN_SUB = 1, PN_MUL = 2, PN_DIV = 3, PN_CLAMP = 4 };
int pn_vbinary_f32(int op, const float* a, const float* b, float* y, int ndim, const int64_t* geometry, float lo,
                   float hi, int threads);

/* ExecuTorch's llama::custom_sdpa in float32 (sdpa.c): out = softmax(q k^T * scale + mask) v per query head, its
 * key and value heads shared by heads / kv_heads query heads, over kv_len keys (causal: a query at position
 * start_pos + row sees keys up to it). Strides are in elements, for (batch, head, sequence); each row of head_dim
 * values is contiguous. mask: NULL, or float32 [q_len, kv_len] rows of stride mask_stride. */
typedef struct {
  const float *q, *k, *v, *mask;
  float* out;
  int64_t batch, heads, kv_heads, q_len, kv_len, head_dim;
  int64_t q_stride[3], k_stride[3], v_stride[3], out_stride[3], mask_stride;
  int64_t start_pos;
  int causal;
  float scale;
} pn_attention;
/* Returns 0, -1 for heads that kv_heads does not divide (or no keys), -2 when memory runs out. */
int pn_sdpa(const pn_attention* a, int threads);
/* Whether the products run in PyTorch's BLAS (sgemm_, as ExecuTorch's run), else in loops of sdpa.c. */
int pn_sdpa_blas(void);

/* Float32 chains in the rounding of PyTorch's CPU kernels, step for step (fused.c). RMSNorm of `rows`
 * contiguous rows of n values: x * (1 / sqrt(mean(x * x) + eps)) * weight, the mean's sum in PyTorch's cascade
 * order over vectors of `lanes` (8 or 16) floats; out may be x but no other bytes of it. Returns -1 (and computes
 * nothing) for other lanes or rows shorter than a vector. */
int pn_rms_norm(const float* x, const float* weight, float* out, int64_t rows, int64_t n, float eps, int lanes);
/* total = a + b over rows * n contiguous floats, then pn_rms_norm of total into out: the residual add before a
 * norm. total may be a or b but no other bytes of them; out may be total but no other bytes of it. */
int pn_add_rms_norm(const float* a, const float* b, float* total, const float* weight, float* out, int64_t rows,
                    int64_t n, float eps, int lanes);
/* PyTorch's clamp of a float: a value equal to a bound kept, NaN kept (move.c's clamp, fpool.c's mean). */
static inline float pn_clamped(float v, float lo, float hi) {
  v = v < lo ? lo : v;
  return v > hi ? hi : v;
}
/* XNNPACK's float global mean of `n` NHWC images of `pixels` (> 0) pixels and c channels (fpool.c): each channel
 * summed in pixel order from 0.0f, times 1.0f / pixels, clamped to [lo, hi]; y n x c. Returns -2 where a thread's
 * sums could not be allocated. */
int pn_mean_f32(const float* x, float* y, int64_t n, int64_t pixels, int64_t c, float lo, float hi, int threads);
/* Layer normalization as ExecuTorch's portable kernel computes it (norm.c): `rows` contiguous rows of n values
 * (1 <= n < PN_LAYER_NORM_LONGEST), weight and bias n values each or NULL (1 and 0), y rows like x (x itself or
 * bytes apart), mean and rstd one value per row. Returns -1 (and computes nothing) for other lengths. */
#define PN_LAYER_NORM_LONGEST 256
int pn_layer_norm(const float* x, const float* weight, const float* bias, float* y, float* mean, float* rstd,
                  int64_t rows, int64_t n, float eps, int threads);
/* The rotary embedding of interleaved pairs: x contiguous [sizes..., 2], each pair (x0, x1) turned into
 * (x0 cos - x1 sin, x0 sin + x1 cos), cos and sin read at their strides (elements) for the four sizes (0 where
 * they broadcast); out contiguous like x, and may be x but no other bytes of it. */
void pn_rotary_pairs(const float* x, const float* cos, const float* sin, float* out, const int64_t sizes[4],
                     const int64_t cos_strides[4], const int64_t sin_strides[4]);

/* A layer's attention over a KV cache in one call (cached_attention.c): rows of `row` floats written into a cache
 * [batch, cache_len, row] at a position; the rotary embeddings of pn_rotary_pairs; pn_sdpa's arguments but the
 * start position and the keys, given per call. */
typedef struct {
  const float* src;
  float* cache;
  int64_t batch, seq, row, src_stride, cache_stride, cache_len;
} pn_cache_write;
typedef struct {
  const float *x, *cos, *sin;
  float* out;
  int64_t sizes[4], cos_strides[4], sin_strides[4];
} pn_rotary;
typedef struct {
  pn_cache_write v_write, k_write;
  pn_rotary q_rotary, k_rotary;
  pn_attention attention;
  int64_t cache_len;
} pn_cached_attention;
/* The value rows written at v_pos, queries and keys rotated, the keys written at k_pos, attention from start_pos
 * over start_pos + q_len keys. Returns 1 (and writes nothing) where a position does not fit the caches, else
 * pn_sdpa's status. */
int pn_cached_attention_run(const pn_cached_attention* c, int64_t v_pos, int64_t k_pos, int64_t start_pos,
                        int threads);
/* Whether pn_cached_attention_run takes these positions (1) or refuses them (0). */
int pn_cached_attention_fits(const pn_cached_attention* c, int64_t v_pos, int64_t k_pos, int64_t start_pos);

/* A SwiGLU's SiLU-product in PyTorch's float32 steps (silu.c): sig = sigmoid(g), prod = g * sig, out = prod * u over
 * n contiguous values, the first n / (2 * lanes) * (2 * lanes) of them through SLEEF's exp as PyTorch's vectors of
 * `lanes` floats compute it, the rest through libm's expf. Each value's three steps are made before the next value's:
 * sig shares no bytes with g or u, nor prod with u; other outputs are their inputs or each other exactly, or apart. */
void pn_silu_mul(const float* g, const float* u, float* sig, float* prod, float* out, int64_t n, int lanes);

/* A recorded run of the calls above (replay.c): each call's kernel, the object it takes (a packed layer, a prepared
 * attention, an 8-bit operator) and its integer arguments as the Python functions take them, in order; `f` are a
 * call's float arguments (eps, a scale, a clamp's bounds). An attention's positions are the replay's: they change
 * from call to call. */
enum pn_call_kind {
  PN_CALL_QUANTIZE_ROWS, PN_CALL_QB4W_RUN, PN_CALL_Q8_RUN, PN_CALL_RMS_NORM, PN_CALL_ADD_RMS_NORM, PN_CALL_SILU_MUL,
  PN_CALL_CACHED_ATTENTION, PN_CALL_QUANTIZE_S8, PN_CALL_DEQUANTIZE_S8, PN_CALL_LOOKUP_S8, PN_CALL_QCONV_RUN,
  PN_CALL_QBINARY_RUN, PN_CALL_QMEAN_S8, PN_CALL_QMAXPOOL_S8, PN_CALL_VUNARY, PN_CALL_SOFTMAX, PN_CALL_DWCONV,
  PN_CALL_CONV, PN_CALL_COPY_STRIDED, PN_CALL_VBINARY, PN_CALL_LAYER_NORM, PN_CALL_MEAN_F32
};
#define PN_CALL_INTS 20
typedef struct {
  int kind;
  const void* object;
  int64_t a[PN_CALL_INTS];
  double f[2];
} pn_call;
/* Makes the `count` calls in order, as the functions that recorded them would have, the k-th attention at
 * positions[3k..3k+2] (v_pos, k_pos, start_pos). Returns 1, having made no call, where an attention refuses its
 * positions; else 0, or the failure of a call (-2: no memory; a call fails no other way that it did not when it
 * was recorded). */
int pn_calls_run(const pn_call* calls, int64_t count, const int64_t* positions);

#endif
