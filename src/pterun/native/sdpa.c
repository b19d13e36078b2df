/* ExecuTorch's llama::custom_sdpa in float32 (its extension/llm/custom_ops/op_sdpa_impl.h, cpu_flash_attention),
 * step for step, so that its outputs are ExecuTorch's bits.
 *
 * For each batch, query head and block of query rows (32 rows for fewer than 192 queries, 64 below 768, else 256;
 * one task each, split over threads in contiguous ranges), over blocks of up to 512 keys:
 *   1. scores = k @ q^T through sgemm_ with ExecuTorch's arguments (cpublas::gemm: column-major, the leading
 *      dimensions of a single row or column normalized as it normalizes them), causal positions set to -inf;
 *   2. with a mask: scores * scale + mask, then the row's maximum (at::vec's reduce_all of 8 lanes); without one:
 *      scores * scale and their maximum in one pass (8 lanes, the tail, then the lanes in order);
 *   3. exp(score - max) in blocks of 16 lanes, glibc's expf each, summed lane by lane and then the 16 lanes in order;
 *      the scores past the last block through exp in double, added to the sum in double and rounded;
 *   4. the online softmax: the running sum becomes sum + exp(old max - max) * old sum, the output so far is
 *      multiplied by exp(old max - max), and out += p @ v through sgemm_;
 *   5. at the end out * (1 / sum).
 * ExecuTorch's x86 wheel compiles this loop for SSE2 alone, where at::vec falls back to loops over arrays of floats:
 * no fused multiply-adds (this file is built with -ffp-contract=off) and libm's functions lane by lane. Its maxima
 * keep at::vec's NaN rules (vec::maximum propagates NaN, std::max returns its first operand against a NaN).
 *
 * sgemm_ is ExecuTorch's BLAS routine, which its custom-ops library takes from PyTorch's library when both are in
 * the process (MKL's, on x86-64): found there by name, never loaded here. Where PyTorch's library has none, the
 * products are the loops below, each sum in order (the same values up to rounding). MKL's sums for more than
 * about a hundred keys depend on how its scratch buffer is aligned: ExecuTorch's comes from its heap, 16-byte
 * aligned at an offset that varies from call to call and by thread, so its own outputs vary in their last bits
 * with it. The buffer here is laid out as ExecuTorch lays out its own, from a 64-byte boundary: one slot per
 * task (ExecuTorch's per thread, each taking one contiguous range of heads), of scores, row maxima, row sums and
 * output rows, so that where ExecuTorch's heap gives it the same alignment and its threads split the heads as
 * the call's threads do, the two agree in every bit.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>

#include "native.h"

typedef void (*sgemm_fn)(const char* transa, const char* transb, const int* m, const int* n, const int* k,
                         const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
                         const float* beta, float* c, const int* ldc);
static sgemm_fn sgemm = NULL;
static pthread_once_t sgemm_found = PTHREAD_ONCE_INIT;

static void find_sgemm(void) {
  void* torch = dlopen("libtorch_cpu.so", RTLD_LAZY | RTLD_NOLOAD);
  if (torch != NULL) sgemm = (sgemm_fn)dlsym(torch, "sgemm_");
}

int pn_sdpa_blas(void) {
  pthread_once(&sgemm_found, find_sgemm);
  return sgemm != NULL;
}

/* C (column-major, m x n, leading dimension ldc) = op(A) B + beta C, op(A) = A (m x k) or its transpose (A k x m),
 * B k x n; alpha is 1 and B is never transposed here. The leading dimensions of a single row or column are
 * normalized as cpublas::gemm normalizes them before it calls sgemm_. */
static void gemm(char transa, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                 int64_t ldb, float beta, float* c, int64_t ldc) {
  if (n == 1) ldc = m;
  if (transa != 'N') {
    if (m == 1) lda = k;
  } else if (k == 1) {
    lda = m;
  }
  if (n == 1) ldb = k;
  if (sgemm != NULL) {
    const int m_ = (int)m, n_ = (int)n, k_ = (int)k, lda_ = (int)lda, ldb_ = (int)ldb, ldc_ = (int)ldc;
    const float one = 1.0f;
    sgemm(&transa, "N", &m_, &n_, &k_, &one, a, &lda_, b, &ldb_, &beta, c, &ldc_);
    return;
  }
  for (int64_t j = 0; j < n; j++) {
    for (int64_t i = 0; i < m; i++) {
      float sum = 0.0f;
      for (int64_t p = 0; p < k; p++) sum += (transa != 'N' ? a[p + i * lda] : a[i + p * lda]) * b[p + j * ldb];
      c[i + j * ldc] = beta == 0.0f ? sum : beta * c[i + j * ldc] + sum;
    }
  }
}

/* at::vec's maximum: NaN from either side propagates (a NaN first operand wins). */
static inline float vec_maximum(float a, float b) {
  const float c = a > b ? a : b;
  return isnan(a) ? a : c;
}

/* std::max: the first operand unless it is less than the second. */
static inline float std_max(float a, float b) { return a < b ? b : a; }

/* at::vec's vec_reduce_all over 8 lanes: lane 0 met by lanes 1 to 7 in order. */
static inline float reduce_lanes(const float lanes[8]) {
  float acc = lanes[0];
  for (int l = 1; l < 8; l++) acc = vec_maximum(acc, lanes[l]);
  return acc;
}

/* x <- x * scale; the maximum (_mul_reduce_max_fusion_kernel). */
static float scale_and_max(float* x, float scale, int64_t size) {
  float lanes[8];
  for (int l = 0; l < 8; l++) lanes[l] = -INFINITY;
  const int64_t whole = size / 8 * 8;
  for (int64_t i = 0; i < whole; i += 8) {
    for (int l = 0; l < 8; l++) {
      x[i + l] = x[i + l] * scale;
      lanes[l] = vec_maximum(lanes[l], x[i + l]);
    }
  }
  float max = -INFINITY;
  for (int64_t i = whole; i < size; i++) {
    x[i] = x[i] * scale;
    max = std_max(max, x[i]);
  }
  return std_max(max, reduce_lanes(lanes));
}

/* at::vec's reduce_all of a row with maximum: the first 8 as the accumulator, then each whole 8, then the rest
 * into the first lanes. */
static float row_max(const float* x, int64_t size) {
  float lanes[8];
  if (size < 8) {
    for (int l = 0; l < 8; l++) lanes[l] = l < size ? x[l] : 0.0f;
    float acc = lanes[0];
    for (int64_t l = 1; l < size; l++) acc = vec_maximum(acc, lanes[l]);
    return acc;
  }
  for (int l = 0; l < 8; l++) lanes[l] = x[l];
  int64_t d = 8;
  for (; d < size - size % 8; d += 8)
    for (int l = 0; l < 8; l++) lanes[l] = vec_maximum(lanes[l], x[d + l]);
  for (int64_t l = 0; l < size - d; l++) lanes[l] = vec_maximum(lanes[l], x[d + l]);
  return reduce_lanes(lanes);
}

/* x <- exp(x - max), returning the sum (_exp_reduce_sum_fusion_kernel). */
static float exp_and_sum(float* x, float max, int64_t size) {
  float lanes[16] = {0};
  const int64_t whole = size / 16 * 16;
  for (int64_t i = 0; i < whole; i += 16) {
    for (int l = 0; l < 16; l++) {
      const float e = expf(x[i + l] - max);
      lanes[l] = lanes[l] + e;
      x[i + l] = e;
    }
  }
  float sum = 0.0f;
  for (int l = 0; l < 16; l++) sum = sum + lanes[l];
  for (int64_t i = whole; i < size; i++) {
    const double e = exp((double)(x[i] - max));
    sum = (float)((double)sum + e);
    x[i] = (float)e;
  }
  return sum;
}

typedef struct {
  const pn_attention* a;
  char* scratch;
  size_t slot;
  int64_t per_task, total, q_split, kv_split, q_slices;
} sdpa_job;

static void attend(const sdpa_job* job, float* qk, float* row_max_, float* row_sum, float* dst, int64_t i,
                   int64_t j, int64_t slice) {
  const pn_attention* a = job->a;
  const int64_t m = slice * job->q_split;
  const int64_t rows = job->q_split < a->q_len - m ? job->q_split : a->q_len - m;
  const int64_t kv_split = job->kv_split;
  for (int64_t r = 0; r < rows; r++) {
    row_max_[r] = -INFINITY;
    row_sum[r] = 0.0f;
  }
  const int64_t first = m + a->start_pos;
  const int64_t num_keys = a->causal ? (first + rows < a->kv_len ? first + rows : a->kv_len) : a->kv_len;
  const int64_t j_kv = j / (a->heads / a->kv_heads);
  const float* q = a->q + i * a->q_stride[0] + j * a->q_stride[1] + m * a->q_stride[2];
  for (int64_t n = 0; n < num_keys; n += kv_split) {
    const int64_t keys = kv_split < a->kv_len - n ? kv_split : a->kv_len - n;
    const float* k = a->k + i * a->k_stride[0] + j_kv * a->k_stride[1] + n * a->k_stride[2];
    gemm('T', keys, rows, a->head_dim, k, a->k_stride[2], q, a->q_stride[2], 0.0f, qk, keys);
    if (a->causal && first <= n + kv_split) {
      for (int64_t r = 0; r < rows && first + r < n + kv_split - 1; r++) {
        const int64_t last = n > first + r ? 0 : r + first + 1 - n;
        for (int64_t c = last; c < keys; c++) qk[r * keys + c] = -INFINITY;
      }
    }
    if (a->mask != NULL) {
      for (int64_t r = 0; r < rows; r++) {
        const float* mask = a->mask + (m + r) * a->mask_stride + n;
        for (int64_t c = 0; c < keys; c++) qk[r * keys + c] = qk[r * keys + c] * a->scale + mask[c];
      }
    }
    for (int64_t r = 0; r < rows; r++) {
      float* row = qk + r * keys;
      float max = a->mask != NULL ? row_max(row, keys) : scale_and_max(row, a->scale, keys);
      max = row_max_[r] > max ? row_max_[r] : max;
      if (max == -INFINITY) {
        for (int64_t c = 0; c < keys; c++) row[c] = 0.0f;
        continue;
      }
      const float sum = exp_and_sum(row, max, keys);
      const float correction = expf(row_max_[r] - max);
      row_sum[r] = sum + correction * row_sum[r];
      row_max_[r] = max;
      if (n > 0)
        for (int64_t d = 0; d < a->head_dim; d++) dst[r * a->head_dim + d] = dst[r * a->head_dim + d] * correction;
    }
    const float* v = a->v + i * a->v_stride[0] + j_kv * a->v_stride[1] + n * a->v_stride[2];
    gemm('N', a->head_dim, rows, keys, v, a->v_stride[2], qk, keys, n == 0 ? 0.0f : 1.0f, dst, a->head_dim);
  }
  float* out = a->out + i * a->out_stride[0] + j * a->out_stride[1] + m * a->out_stride[2];
  for (int64_t r = 0; r < rows; r++) {
    const float reciprocal = 1.0f / row_sum[r];
    for (int64_t d = 0; d < a->head_dim; d++) out[r * a->out_stride[2] + d] = dst[r * a->head_dim + d] * reciprocal;
  }
}

static void sdpa_task(void* ctx, int64_t t) {
  const sdpa_job* job = ctx;
  float* qk = (float*)(job->scratch + (size_t)t * job->slot);
  float* maxima = qk + job->q_split * job->kv_split;
  float* sums = maxima + job->q_split;
  float* dst = sums + job->q_split;
  const int64_t end = (t + 1) * job->per_task < job->total ? (t + 1) * job->per_task : job->total;
  for (int64_t z = t * job->per_task; z < end; z++) {
    const int64_t slice = z % job->q_slices, j = z / job->q_slices % job->a->heads;
    const int64_t i = z / (job->q_slices * job->a->heads);
    attend(job, qk, maxima, sums, dst, i, j, slice);
  }
}

/* Each calling thread keeps one buffer for its calls' tasks, grown as needed and freed when the thread ends. */
typedef struct {
  void* data;
  size_t size;
} scratch;
static pthread_key_t scratch_key;
static pthread_once_t scratch_made = PTHREAD_ONCE_INIT;

static void free_scratch(void* p) {
  scratch* s = p;
  free(s->data);
  free(s);
}

static void make_scratch_key(void) { pthread_key_create(&scratch_key, free_scratch); }

static void* thread_scratch(size_t size) {
  pthread_once(&scratch_made, make_scratch_key);
  scratch* s = pthread_getspecific(scratch_key);
  if (s == NULL) {
    s = calloc(1, sizeof(scratch));
    if (s == NULL || pthread_setspecific(scratch_key, s) != 0) {
      free(s);
      return NULL;
    }
  }
  size = (size + 63) / 64 * 64; /* aligned_alloc's rule */
  if (s->size < size) {
    free(s->data);
    s->data = aligned_alloc(64, size);
    s->size = s->data != NULL ? size : 0;
  }
  return s->data;
}

int pn_sdpa(const pn_attention* a, int threads) {
  pthread_once(&sgemm_found, find_sgemm);
  sdpa_job job = {.a = a};
  job.q_split = a->q_len >= 768 ? 256 : a->q_len >= 192 ? 64 : 32;
  if (job.q_split > a->q_len) job.q_split = a->q_len;
  job.kv_split = a->kv_len < 512 ? a->kv_len : 512;
  if (a->batch <= 0 || a->heads <= 0 || a->q_len <= 0 || a->head_dim <= 0) return 0;
  if (a->kv_heads <= 0 || a->heads % a->kv_heads != 0 || a->kv_len <= 0) return -1;
  job.q_slices = (a->q_len - 1) / job.q_split + 1;
  job.total = a->batch * a->heads * job.q_slices;
  const int64_t tasks_wanted = threads < 1 ? 1 : threads < job.total ? threads : job.total;
  job.per_task = (job.total + tasks_wanted - 1) / tasks_wanted;
  const int64_t tasks = (job.total + job.per_task - 1) / job.per_task;
  const size_t floats = (size_t)(job.q_split * job.kv_split + 2 * job.q_split + job.q_split * a->head_dim);
  job.slot = floats * sizeof(float);
  job.scratch = thread_scratch(job.slot * (size_t)tasks);
  if (job.scratch == NULL) return -2;
  /* Queries of several rows apart from PyTorch's OpenMP team: from inside the team MKL's sgemm_ runs a product
   * on that thread alone, where under ExecuTorch's pool it chooses its own threads, and on an AMD EPYC the last
   * of five columns came out apart from ExecuTorch's. A decode step's one row comes out the same either way
   * (tests/kernels/test_llm_kernels.py), and on the team it finds the threads the step's other calls woke. */
  if (a->q_len > 1)
    pn_parallel_apart(sdpa_task, &job, tasks, threads);
  else
    pn_parallel(sdpa_task, &job, tasks, threads);
  return 0;
}
