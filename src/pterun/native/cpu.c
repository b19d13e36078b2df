/* Which instruction sets this CPU has (the compiler's cpuid builtins), and the workers kernels split work over. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "native.h"

int pn_cpu_isa(void) {
#if defined(__x86_64__) || defined(_M_X64)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512vnni"))
    return PN_AVX512VNNI;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return PN_AVX2;
#endif
  return PN_PORTABLE;
}

const char* pn_isa_name(int isa) {
  switch (isa) {
    case PN_AVX512VNNI: return "avx512vnni";
    case PN_AVX2: return "avx2";
    default: return "portable";
  }
}

/* A pool of sleeping workers. One parallel call at a time holds it (callers from several threads take turns);
 * the calling thread works too, so `threads` workers in all, never more. */
#define PN_MAX_WORKERS 255

static pthread_mutex_t pool_call = PTHREAD_MUTEX_INITIALIZER;   /* one parallel call at a time */
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pool_wake = PTHREAD_COND_INITIALIZER;
static pthread_cond_t pool_done = PTHREAD_COND_INITIALIZER;
static int pool_started = 0;
static unsigned long pool_generation = 0;
static pn_task pool_task;
static void* pool_ctx;
static int64_t pool_count;
static _Atomic int64_t pool_next;
static int pool_wanted = 0;  /* workers that may join the current call (none once the caller's tasks are taken) */
static int pool_busy = 0;    /* workers that joined it and are still working */

static void run_tasks(void) {
  for (;;) {
    int64_t i = atomic_fetch_add(&pool_next, 1);
    if (i >= pool_count) return;
    pool_task(pool_ctx, i);
  }
}

static void* worker(void* arg) {
  int id = (int)(intptr_t)arg;
  unsigned long seen = 0;
  pthread_mutex_lock(&pool_lock);
  for (;;) {
    while (pool_generation == seen || id >= pool_wanted) {
      if (pool_generation != seen) seen = pool_generation; /* a call without this worker */
      pthread_cond_wait(&pool_wake, &pool_lock);
    }
    seen = pool_generation;
    pool_busy++;
    pthread_mutex_unlock(&pool_lock);
    run_tasks();
    pthread_mutex_lock(&pool_lock);
    if (--pool_busy == 0) pthread_cond_signal(&pool_done);
  }
  return NULL;
}

/* A forked child has none of the parent's workers: it starts its own. */
static void forget_workers(void) {
  pthread_mutex_init(&pool_call, NULL);
  pthread_mutex_init(&pool_lock, NULL);
  pthread_cond_init(&pool_wake, NULL);
  pthread_cond_init(&pool_done, NULL);
  pool_started = 0;
  pool_wanted = pool_busy = 0;
}

static pthread_once_t fork_handler = PTHREAD_ONCE_INIT;
static void install_fork_handler(void) { pthread_atfork(NULL, NULL, forget_workers); }

/* PyTorch's own OpenMP team, where the process has one (PyTorch's x86 and AArch64 Linux builds load GNU
 * OpenMP, libgomp.so.1, for their intra-op threads). A call splits its tasks over that team rather than over
 * workers of its own: PyTorch's threads spin for a while after each operator, and on a machine with as many
 * cores as threads they held the cores our sleeping workers needed, so a kernel called between PyTorch's
 * operators ran on the calling thread alone. One team for both, as ExecuTorch runs every kernel on one
 * pthreadpool. Found by name among the libraries already loaded, never loaded here; in a forked child, and
 * where there is none, the pool above serves. */
typedef void (*gomp_parallel_fn)(void (*fn)(void*), void* data, unsigned threads, unsigned flags);
static gomp_parallel_fn gomp_parallel = NULL;
static pid_t gomp_process;
static pthread_once_t gomp_found = PTHREAD_ONCE_INIT;

/* The process that loaded the extension: a child forked from it has no team (GNU OpenMP does not survive a
 * fork), whenever its first parallel call comes. */
__attribute__((constructor)) static void note_process(void) { gomp_process = getpid(); }

static void find_gomp(void) {
  void* library = dlopen("libgomp.so.1", RTLD_LAZY | RTLD_NOLOAD);
  if (library != NULL) gomp_parallel = (gomp_parallel_fn)dlsym(library, "GOMP_parallel");
}

typedef struct {
  pn_task task;
  void* ctx;
  int64_t count;
  _Atomic int64_t next;
} team_job;

static void team_member(void* data) {
  team_job* job = data;
  for (;;) {
    int64_t i = atomic_fetch_add(&job->next, 1);
    if (i >= job->count) return;
    job->task(job->ctx, i);
  }
}

int pn_parallel_team(void) {
  pthread_once(&gomp_found, find_gomp);
  return gomp_parallel != NULL && getpid() == gomp_process;
}

static void pool_run(pn_task task, void* ctx, int64_t count, int threads);

/* The tasks on the calling thread alone where one thread is all the call may use, else on PyTorch's OpenMP team
 * (where `team` and the process has one) or on workers of pterun's own. */
static void parallel(pn_task task, void* ctx, int64_t count, int threads, int team) {
  if (threads > count) threads = (int)count;
  if (threads > PN_MAX_WORKERS + 1) threads = PN_MAX_WORKERS + 1;
  if (threads <= 1) {
    for (int64_t i = 0; i < count; i++) task(ctx, i);
    return;
  }
  if (team && pn_parallel_team()) {
    team_job job = {task, ctx, count, 0};
    gomp_parallel(team_member, &job, (unsigned)threads, 0);
    return;
  }
  pool_run(task, ctx, count, threads);
}

void pn_parallel(pn_task task, void* ctx, int64_t count, int threads) { parallel(task, ctx, count, threads, 1); }

void pn_parallel_apart(pn_task task, void* ctx, int64_t count, int threads) {
  parallel(task, ctx, count, threads, 0);
}

static void pool_run(pn_task task, void* ctx, int64_t count, int threads) {
  pthread_once(&fork_handler, install_fork_handler);
  pthread_mutex_lock(&pool_call);
  pthread_mutex_lock(&pool_lock);
  while (pool_started < threads - 1) {
    pthread_t thread;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int failed = pthread_create(&thread, &attr, worker, (void*)(intptr_t)pool_started);
    pthread_attr_destroy(&attr);
    if (failed) break;
    pool_started++;
  }
  int helpers = pool_started < threads - 1 ? pool_started : threads - 1;
  pool_task = task;
  pool_ctx = ctx;
  pool_count = count;
  atomic_store(&pool_next, 0);
  pool_wanted = helpers;
  pool_busy = 0;
  pool_generation++;
  pthread_cond_broadcast(&pool_wake);
  pthread_mutex_unlock(&pool_lock);
  run_tasks();
  /* Every task is taken: workers still asleep sit this call out (waiting for them to wake would cost a small
   * call more than its work), and those that joined finish theirs. */
  pthread_mutex_lock(&pool_lock);
  pool_wanted = 0;
  while (pool_busy > 0) pthread_cond_wait(&pool_done, &pool_lock);
  pthread_mutex_unlock(&pool_lock);
  pthread_mutex_unlock(&pool_call);
}

#if defined(__x86_64__) || defined(_M_X64)
#include <xmmintrin.h>

/* MXCSR's flush-to-zero (0x8000) and denormals-are-zero (0x0040) bits, as pthreadpool sets them. */
unsigned pn_denormals_off(void) {
  const unsigned state = _mm_getcsr();
  _mm_setcsr(state | 0x8040u);
  return state;
}

void pn_denormals_restore(unsigned state) { _mm_setcsr(state); }
#else
unsigned pn_denormals_off(void) { return 0; }
void pn_denormals_restore(unsigned state) { (void)state; }
#endif

void* pn_zeroed(size_t bytes) {
  const size_t rounded = (bytes + 63) / 64 * 64; /* aligned_alloc's rule: a multiple of the alignment */
  void* p = aligned_alloc(64, rounded ? rounded : 64);
  if (p) memset(p, 0, rounded ? rounded : 64);
  return p;
}

int64_t pn_tiles_per_task(int64_t tiles, int64_t tile, int64_t rows, int64_t k, int threads) {
  if (threads <= 1) return tiles;
  int64_t per = (tiles + 4 * threads - 1) / (4 * threads);
  const int64_t outputs = (INT64_C(1) << 20) / (rows * (k ? k : 1)) + 1;
  const int64_t least = (outputs + tile - 1) / tile;
  return per < least ? least : per;
}

void pn_block_sums(const int8_t* x, int64_t x_stride, int64_t rows, int64_t blocks, int64_t block, int32_t* sums) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t b = 0; b < blocks; b++) {
      const int8_t* xb = x + r * x_stride + b * block;
      int32_t total = 0;
      for (int64_t i = 0; i < block; i++) total += xb[i];
      sums[r * blocks + b] = total;
    }
}
