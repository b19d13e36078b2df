/* XNNPACK's float32 global average pooling of NHWC images: each channel summed over the pixels in their order,
 * from 0.0f, one rounding per pixel, then times the reciprocal of the pixel count (a float32 product, not a
 * division), then the node's clamp. That order gave ExecuTorch's bits on every image tried, 4 x 4 to 56 x 56
 * pixels and 3 to 1,280 channels; PyTorch's mean sums in another order and divides.
 *
 * The channels are the vector lanes: each lane's sum is its own sequence of additions, so the compiler may
 * vectorize across channels without changing a bit. */
#include <stdlib.h>
#include <string.h>

#include "native.h"

typedef struct {
  const float* x;
  float* y;
  int64_t pixels, c;
  float scale, lo, hi;
  _Atomic int failed;
} mean_args;

static void mean_image(void* ctx, int64_t image) {
  mean_args* a = ctx;
  const int64_t c = a->c;
  float sums[512];
  float* acc = c <= 512 ? sums : malloc((size_t)c * sizeof(float));
  if (!acc) {
    a->failed = 1;
    return;
  }
  for (int64_t i = 0; i < c; i++) acc[i] = 0.0f;
  const float* x = a->x + image * a->pixels * c;
  for (int64_t p = 0; p < a->pixels; p++)
    for (int64_t i = 0; i < c; i++) acc[i] += x[p * c + i];
  float* y = a->y + image * c;
  for (int64_t i = 0; i < c; i++) y[i] = pn_clamped(acc[i] * a->scale, a->lo, a->hi);
  if (acc != sums) free(acc);
}

int pn_mean_f32(const float* x, float* y, int64_t n, int64_t pixels, int64_t c, float lo, float hi, int threads) {
  mean_args a = {.x = x, .y = y, .pixels = pixels, .c = c, .scale = 1.0f / (float)pixels, .lo = lo, .hi = hi};
  if (n * pixels * c < (INT64_C(1) << 16)) threads = 1;
  pn_parallel(mean_image, &a, n, threads);
  return a.failed ? -2 : 0;
}
