/* Elements moved without arithmetic (transposes, slices, concatenations, pads' interiors) and XNNPACK's float
 * binary arithmetic with broadcasting: loops over a geometry of up to PN_MOVE_DIMS dimensions, the innermost one a
 * run. Each output is one IEEE operation of its two inputs, then the clamp (or a copy of its input), so the
 * results are those of any other implementation of the same operations, XNNPACK's and PyTorch's included. */
#include <string.h>

#include "native.h"

typedef struct {
  const char* x;
  const char* x2; /* NULL: a copy of x */
  char* y;
  int ndim, elem, op;
  float lo, hi;
  const int64_t* sizes;
  const int64_t* xs; /* strides in elements, per dimension */
  const int64_t* x2s;
  const int64_t* ys;
  int64_t outer; /* indices of dimension 0 per task */
  int plane;     /* a copy whose last two dimensions are transposed: moved in tiles */
} move_args;

static void copy_run(const char* x, char* y, int64_t n, int64_t xs, int64_t ys, int elem) {
  if (xs == 1 && ys == 1) {
    memcpy(y, x, (size_t)(n * elem));
    return;
  }
  switch (elem) {
    case 1:
      for (int64_t i = 0; i < n; i++) y[i * ys] = x[i * xs];
      break;
    case 2:
      for (int64_t i = 0; i < n; i++) ((uint16_t*)y)[i * ys] = ((const uint16_t*)x)[i * xs];
      break;
    case 4:
      for (int64_t i = 0; i < n; i++) ((uint32_t*)y)[i * ys] = ((const uint32_t*)x)[i * xs];
      break;
    default:
      for (int64_t i = 0; i < n; i++) ((uint64_t*)y)[i * ys] = ((const uint64_t*)x)[i * xs];
  }
}

/* A transpose: y[r * y_row + c] = x[r + c * x_col] for rows [r0, r1) and cols [0, cols), in tiles of about
 * TILE x TILE elements (taller where there are fewer columns), so the strided side of each tile stays in cache
 * while the other is read or written in order; the inner loop runs along the tile's longer side. */
#define TILE 32
#define PLANE(T)                                                                                   \
  for (int64_t rb = r0; rb < r1; rb += tall) {                                                     \
    const int64_t re = rb + tall < r1 ? rb + tall : r1;                                            \
    for (int64_t cb = 0; cb < cols; cb += TILE) {                                                  \
      const int64_t ce = cb + TILE < cols ? cb + TILE : cols;                                      \
      if (ce - cb >= re - rb) {                                                                    \
        for (int64_t r = rb; r < re; r++)                                                          \
          for (int64_t c = cb; c < ce; c++) ((T*)y)[r * y_row + c] = ((const T*)x)[r + c * x_col]; \
      } else {                                                                                     \
        for (int64_t c = cb; c < ce; c++)                                                          \
          for (int64_t r = rb; r < re; r++) ((T*)y)[r * y_row + c] = ((const T*)x)[r + c * x_col]; \
      }                                                                                            \
    }                                                                                              \
  }

static void plane_run(const char* x, char* y, int64_t r0, int64_t r1, int64_t cols, int64_t x_col, int64_t y_row,
                      int elem) {
  const int64_t tall = cols < TILE ? TILE * TILE / cols : TILE; /* rows per tile */
  switch (elem) {
    case 1:
      PLANE(uint8_t)
      break;
    case 2:
      PLANE(uint16_t)
      break;
    case 4:
      PLANE(uint32_t)
      break;
    default:
      PLANE(uint64_t)
  }
}

/* One operation over a run: both inputs contiguous, or one of them a single value (broadcast), vectorized by
 * the compiler; else strided. */
#define BINARY_RUN(EXPR)                                                                              \
  do {                                                                                                \
    if (ys == 1 && as == 1 && bs == 1) {                                                              \
      for (int64_t i = 0; i < n; i++) {                                                               \
        const float p = a[i], q = b[i];                                                               \
        y[i] = pn_clamped(EXPR, lo, hi);                                                              \
      }                                                                                               \
    } else if (ys == 1 && as == 1 && bs == 0) {                                                       \
      const float q = b[0];                                                                           \
      for (int64_t i = 0; i < n; i++) {                                                               \
        const float p = a[i];                                                                         \
        y[i] = pn_clamped(EXPR, lo, hi);                                                              \
      }                                                                                               \
    } else if (ys == 1 && as == 0 && bs == 1) {                                                       \
      const float p = a[0];                                                                           \
      for (int64_t i = 0; i < n; i++) {                                                               \
        const float q = b[i];                                                                         \
        y[i] = pn_clamped(EXPR, lo, hi);                                                              \
      }                                                                                               \
    } else {                                                                                          \
      for (int64_t i = 0; i < n; i++) {                                                               \
        const float p = a[i * as], q = b[i * bs];                                                     \
        y[i * ys] = pn_clamped(EXPR, lo, hi);                                                         \
      }                                                                                               \
    }                                                                                                 \
  } while (0)

static void binary_run(int op, const float* a, const float* b, float* y, int64_t n, int64_t as, int64_t bs,
                       int64_t ys, float lo, float hi) {
  switch (op) {
    case PN_ADD:
      BINARY_RUN(p + q);
      break;
    case PN_SUB:
      BINARY_RUN(p - q);
      break;
    case PN_MUL:
      BINARY_RUN(p * q);
      break;
    case PN_DIV:
      BINARY_RUN(p / q);
      break;
    default: /* PN_CLAMP */
      for (int64_t i = 0; i < n; i++) y[i * ys] = pn_clamped(a[i * as], lo, hi);
  }
}

static void inner(const move_args* m, int64_t xo, int64_t x2o, int64_t yo) {
  const int last = m->ndim - 1;
  const int64_t n = m->sizes[last];
  if (m->x2)
    binary_run(m->op, (const float*)m->x + xo, (const float*)m->x2 + x2o, (float*)m->y + yo, n, m->xs[last],
               m->x2s[last], m->ys[last], m->lo, m->hi);
  else
    copy_run(m->x + xo * m->elem, m->y + yo * m->elem, n, m->xs[last], m->ys[last], m->elem);
}

/* Indices [task * outer, (task + 1) * outer) of dimension 0, every index of the dimensions between. */
static void move_task(void* ctx, int64_t task) {
  const move_args* m = ctx;
  const int nd = m->ndim;
  if (nd == 1) {
    inner(m, 0, 0, 0);
    return;
  }
  const int64_t begin = task * m->outer;
  const int64_t end = begin + m->outer < m->sizes[0] ? begin + m->outer : m->sizes[0];
  if (m->plane && nd == 2) {
    plane_run(m->x, m->y, begin, end, m->sizes[1], m->xs[1], m->ys[0], m->elem);
    return;
  }
  int64_t index[PN_MOVE_DIMS] = {0};
  const int last = m->plane ? nd - 2 : nd - 1; /* the dimensions a run (or a plane) covers start here */
  for (int64_t i0 = begin; i0 < end; i0++) {
    for (int d = 1; d < last; d++) index[d] = 0;
    for (;;) {
      int64_t xo = i0 * m->xs[0], x2o = m->x2 ? i0 * m->x2s[0] : 0, yo = i0 * m->ys[0];
      for (int d = 1; d < last; d++) {
        xo += index[d] * m->xs[d];
        yo += index[d] * m->ys[d];
        if (m->x2) x2o += index[d] * m->x2s[d];
      }
      if (m->plane)
        plane_run(m->x + xo * m->elem, m->y + yo * m->elem, 0, m->sizes[nd - 2], m->sizes[nd - 1], m->xs[nd - 1],
                  m->ys[nd - 2], m->elem);
      else
        inner(m, xo, x2o, yo);
      int d = last - 1;
      while (d >= 1 && ++index[d] == m->sizes[d]) index[d--] = 0;
      if (d < 1) break;
    }
  }
}

/* Tasks of whole indices of dimension 0, 2^16 elements each at least: a worker's wake-up is worth no less. */
static void run(move_args* m, int threads) {
  int64_t total = 1;
  for (int d = 0; d < m->ndim; d++) total *= m->sizes[d];
  if (total <= 0) return;
  int64_t tasks = 1;
  if (threads > 1 && m->ndim > 1 && total >= (INT64_C(1) << 17)) {
    tasks = total >> 16;
    if (tasks > 4 * (int64_t)threads) tasks = 4 * (int64_t)threads;
    if (tasks > m->sizes[0]) tasks = m->sizes[0];
  }
  m->outer = (m->sizes[0] + tasks - 1) / tasks;
  pn_parallel(move_task, m, m->ndim > 1 ? (m->sizes[0] + m->outer - 1) / m->outer : 1, threads);
}

int pn_copy_strided(const void* x, void* y, int elem, int ndim, const int64_t* geometry, int threads) {
  if (ndim < 1 || ndim > PN_MOVE_DIMS || (elem != 1 && elem != 2 && elem != 4 && elem != 8)) return -1;
  move_args m = {(const char*)x + geometry[0] * elem, NULL, (char*)y + geometry[1] * elem, ndim, elem, 0, 0.0f,
                 0.0f, geometry + 2, geometry + 2 + ndim, NULL, geometry + 2 + 2 * ndim, 0, 0};
  /* x runs along the second-to-last dimension, y along the last: a transpose, in tiles. */
  m.plane = ndim >= 2 && m.xs[ndim - 2] == 1 && m.ys[ndim - 1] == 1 && m.sizes[ndim - 2] > 1 && m.sizes[ndim - 1] > 1;
  run(&m, threads);
  return 0;
}

int pn_vbinary_f32(int op, const float* a, const float* b, float* y, int ndim, const int64_t* geometry, float lo,
                   float hi, int threads) {
  if (ndim < 1 || ndim > PN_MOVE_DIMS || op < PN_ADD || op > PN_CLAMP) return -1;
  move_args m = {(const char*)a, (const char*)b, (char*)y, ndim, 4, op, lo, hi, geometry, geometry + ndim,
                 geometry + 2 * ndim, geometry + 3 * ndim, 0, 0};
  run(&m, threads);
  return 0;
}
