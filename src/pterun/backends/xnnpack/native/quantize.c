/* XNNPACK's dynamic quantization of float rows (qd8), as its x86 kernels compute it. */
#include <math.h>

#include "native.h"

/* XNNPACK's math_min_f32 / math_max_f32 on x86: the second operand unless the comparison holds (NaN loses). */
static inline float x86_min(float a, float b) { return b < a ? b : a; }
static inline float x86_max(float a, float b) { return b < a ? a : b; }

void pn_quantize_rows(const float* x, int64_t rows, int64_t cols, int64_t x_stride, int8_t* q, int64_t q_stride,
                      float* zero_point, float* scale) {
  for (int64_t r = 0; r < rows; r++) {
    const float* row = x + r * x_stride;
    int8_t* out = q + r * q_stride;
    float lo = cols ? row[0] : 0.0f, hi = lo;
    for (int64_t i = 1; i < cols; i++) {
      lo = row[i] < lo ? row[i] : lo;
      hi = row[i] > hi ? row[i] : hi;
    }
    /* xnn_qd8_asymmetric_quantization_params */
    const float rmin = x86_min(0.0f, lo), rmax = x86_max(0.0f, hi);
    const float s = rmin == rmax ? 1.0f : 255.0f / (rmax - rmin);
    const float descaled_min = rmin * s, descaled_max = rmax * s;
    const float from_min = -128.0f + descaled_min, from_max = 127.0f + descaled_max;
    float zp = from_min + from_max > 0 ? -128.0f - descaled_min : 127.0f - descaled_max;
    zp = x86_min(x86_max(zp, -128.0f), 127.0f);
    const int32_t z = (int32_t)lrintf(zp);
    zero_point[r] = (float)z;
    scale[r] = 1.0f / s;
    /* f32-qs8-vcvt: min(x * scale, 32767) (NaN gives 32767), rounded to nearest even, saturated to int16, plus
     * the zero point saturated to int16, then to int8 */
    for (int64_t i = 0; i < cols; i++) {
      float v = row[i] * s;
      v = v < 32767.0f ? v : 32767.0f;
      int32_t n = v >= -32768.0f ? (int32_t)lrintf(v) : -32768; /* cvtps: out of range (and -inf) is INT_MIN */
      n += z;
      out[i] = (int8_t)(n < -128 ? -128 : n > 127 ? 127 : n);
    }
  }
}
