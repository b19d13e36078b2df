/* pterun.native._kernels: the kernels of native.h, called from generated code with plain integers
 * (tensors' data pointers and sizes) so that no call converts a tensor. The stable ABI (abi3) keeps the built
 * module independent of the Python and torch versions.
 *
 * The callers (backends/xnnpack/nodes/native.py, kernels/llm/attention.py, kernels/fused.py) own every buffer and check every size against the graph before packing or
 * calling: these functions trust the pointers and sizes they are given. */
#define PY_SSIZE_T_CLEAN
#define Py_LIMITED_API 0x030B0000
#include <Python.h>
#include <stdlib.h>
#include <string.h>

#include "native.h"

#define QB4W_CAPSULE "pterun.xnnpack.qb4w"

static int ints(PyObject* const* args, Py_ssize_t count, long long* out) {
  for (Py_ssize_t i = 0; i < count; i++) {
    out[i] = PyLong_AsLongLong(args[i]);
    if (out[i] == -1 && PyErr_Occurred()) return 0;
  }
  return 1;
}

/* Recording (record_start, record_stop, replay): while this thread records, each call of a function that can be
 * made again from its arguments (those that call `recorded`) is kept after it runs, and any other call spoils the
 * recording (every function with arguments checks them with `arity`), as does a call that fails: only a run of
 * calls that were all kept is ever made again. A recording keeps the packed layers it calls alive. */
typedef struct {
  pn_call* calls;
  Py_ssize_t count, capacity;
  PyObject* objects; /* list */
  int spoiled;
} recording;

static _Thread_local recording* recording_now;

static void spoil(void) {
  if (recording_now) recording_now->spoiled = 1;
}

static void recorded(int kind, PyObject* object, const void* pointer, const long long* a, int count, double f0,
                     double f1) {
  recording* r = recording_now;
  if (r == NULL || r->spoiled) return;
  if (r->count == r->capacity) {
    Py_ssize_t capacity = r->capacity ? 2 * r->capacity : 64;
    pn_call* grown = realloc(r->calls, (size_t)capacity * sizeof *grown);
    if (grown == NULL) {
      r->spoiled = 1;
      return;
    }
    r->calls = grown;
    r->capacity = capacity;
  }
  if (object != NULL && PyList_Append(r->objects, object) < 0) {
    PyErr_Clear();
    r->spoiled = 1;
    return;
  }
  pn_call* c = &r->calls[r->count++];
  memset(c, 0, sizeof *c);
  c->kind = kind;
  c->object = pointer;
  for (int i = 0; i < count; i++) c->a[i] = a[i];
  c->f[0] = f0;
  c->f[1] = f1;
}

static int counted(Py_ssize_t nargs, Py_ssize_t expected, const char* name) {
  if (nargs == expected) return 1;
  spoil();
  PyErr_Format(PyExc_TypeError, "%s takes %zd arguments, got %zd", name, expected, nargs);
  return 0;
}

static int arity(Py_ssize_t nargs, Py_ssize_t expected, const char* name) {
  spoil();
  return counted(nargs, expected, name);
}

/* A recordable call that failed: NULL (its error is set), and the recording spoiled. */
static PyObject* spoiled(void) {
  spoil();
  return NULL;
}

/* A convolution's 19 integer arguments and its thread count, as one call's kept integers. */
static const long long* with_threads(long long* a, long long threads) {
  a[19] = threads;
  return a;
}

static PyObject* py_cpu_isa(PyObject* self, PyObject* unused) {
  (void)self;
  (void)unused;
  return PyUnicode_FromString(pn_isa_name(pn_cpu_isa()));
}

static PyObject* py_parallel_team(PyObject* self, PyObject* unused) {
  (void)self;
  (void)unused;
  return PyBool_FromLong(pn_parallel_team());
}

/* quantize_rows(isa, x, rows, cols, x_stride, q, q_stride, zero_point, scale) */
static PyObject* py_quantize_rows(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  long long a[9];
  if (!counted(nargs, 9, "quantize_rows") || !ints(args, 9, a)) return spoiled();
  Py_BEGIN_ALLOW_THREADS
  pn_quantize_rows((int)a[0], (const float*)(intptr_t)a[1], a[2], a[3], a[4], (int8_t*)(intptr_t)a[5], a[6],
                   (float*)(intptr_t)a[7], (float*)(intptr_t)a[8]);
  Py_END_ALLOW_THREADS
  recorded(PN_CALL_QUANTIZE_ROWS, NULL, NULL, a, 9, 0.0, 0.0);
  Py_RETURN_NONE;
}

/* quantize_s8(isa, x, y, n, inverse_scale, zero_point, threads), dequantize_s8(isa, x, y, n, scale, zero_point,
 * threads) */
static PyObject* py_convert_s8(PyObject* const* args, Py_ssize_t nargs, int quantize) {
  long long a[6];
  if (!counted(nargs, 7, quantize ? "quantize_s8" : "dequantize_s8") || !ints(args, 4, a) ||
      !ints(args + 5, 2, a + 4))
    return spoiled();
  const double scale = PyFloat_AsDouble(args[4]);
  if (PyErr_Occurred()) return spoiled();
  Py_BEGIN_ALLOW_THREADS
  if (quantize)
    pn_quantize_s8((int)a[0], (const float*)(intptr_t)a[1], (int8_t*)(intptr_t)a[2], a[3], (float)scale,
                   (int32_t)a[4], (int)a[5]);
  else
    pn_dequantize_s8((int)a[0], (const int8_t*)(intptr_t)a[1], (float*)(intptr_t)a[2], a[3], (int32_t)a[4],
                     (float)scale, (int)a[5]);
  Py_END_ALLOW_THREADS
  recorded(quantize ? PN_CALL_QUANTIZE_S8 : PN_CALL_DEQUANTIZE_S8, NULL, NULL, a, 6, scale, 0.0);
  Py_RETURN_NONE;
}

static PyObject* py_quantize_s8(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  return py_convert_s8(args, nargs, 1);
}

static PyObject* py_dequantize_s8(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  return py_convert_s8(args, nargs, 0);
}

/* lookup_s8(isa, table, x, y, n, threads) */
static PyObject* py_lookup_s8(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  long long a[6];
  if (!counted(nargs, 6, "lookup_s8") || !ints(args, 6, a)) return spoiled();
  Py_BEGIN_ALLOW_THREADS
  pn_lookup_s8((int)a[0], (const int8_t*)(intptr_t)a[1], (const int8_t*)(intptr_t)a[2], (int8_t*)(intptr_t)a[3], a[4],
               (int)a[5]);
  Py_END_ALLOW_THREADS
  recorded(PN_CALL_LOOKUP_S8, NULL, NULL, a, 6, 0.0, 0.0);
  Py_RETURN_NONE;
}

static void qb4w_destroy(PyObject* capsule) { pn_qb4w_free(PyCapsule_GetPointer(capsule, QB4W_CAPSULE)); }

/* qb4w_start_sums(n, k, block, chunk, weights, scales, start) */
static PyObject* py_qb4w_start_sums(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  long long a[7];
  if (!arity(nargs, 7, "qb4w_start_sums") || !ints(args, 7, a)) return NULL;
  Py_BEGIN_ALLOW_THREADS
  pn_qb4w_start_sums(a[0], a[1], a[2], a[3], (const uint8_t*)(intptr_t)a[4], (const float*)(intptr_t)a[5],
                     (float*)(intptr_t)a[6]);
  Py_END_ALLOW_THREADS
  Py_RETURN_NONE;
}

/* qb4w_pack(isa, family, n, k, block, weights, scales, start, bias, out_min, out_max) -> capsule (bias 0: none) */
static PyObject* py_qb4w_pack(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  long long a[9];
  if (!arity(nargs, 11, "qb4w_pack") || !ints(args, 9, a)) return NULL;
  const double lo = PyFloat_AsDouble(args[9]), hi = PyFloat_AsDouble(args[10]);
  if (PyErr_Occurred()) return NULL;
  pn_qb4w* layer;
  Py_BEGIN_ALLOW_THREADS
  layer = pn_qb4w_pack((int)a[0], (int)a[1], a[2], a[3], a[4], (const uint8_t*)(intptr_t)a[5],
                       (const float*)(intptr_t)a[6], (const float*)(intptr_t)a[7], (const float*)(intptr_t)a[8],
                       (float)lo, (float)hi);
  Py_END_ALLOW_THREADS
  if (!layer) return PyErr_NoMemory();
  PyObject* capsule = PyCapsule_New(layer, QB4W_CAPSULE, qb4w_destroy);
  if (!capsule) pn_qb4w_free(layer);
  return capsule;
}

static PyObject* py_qb4w_isa(PyObject* self, PyObject* capsule) {
  (void)self;
  const pn_qb4w* layer = PyCapsule_GetPointer(capsule, QB4W_CAPSULE);
  return layer ? PyUnicode_FromString(pn_isa_name(pn_qb4w_isa(layer))) : NULL;
}

/* qb4w_run(layer, rows, x, x_stride, zero_point, scale, out, out_stride, threads) */
static PyObject* py_qb4w_run(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  long long a[8];
  if (!counted(nargs, 9, "qb4w_run") || !ints(args + 1, 8, a)) return spoiled();
  const pn_qb4w* layer = PyCapsule_GetPointer(args[0], QB4W_CAPSULE);
  if (!layer) return spoiled();
  Py_BEGIN_ALLOW_THREADS
  pn_qb4w_run(layer, a[0], (const int8_t*)(intptr_t)a[1], a[2], (const float*)(intptr_t)a[3],
              (const float*)(intptr_t)a[4], (float*)(intptr_t)a[5], a[6], (int)a[7]);
  Py_END_ALLOW_THREADS
  recorded(PN_CALL_QB4W_RUN, args[0], layer, a, 8, 0.0, 0.0);
  Py_RETURN_NONE;
}

#define Q8_CAPSULE "pterun.xnnpack.q8"

static void q8_destroy(PyObject* capsule) { pn_q8_free(PyCapsule_GetPointer(capsule, Q8_CAPSULE)); }

/* q8_pack(isa, n, k, weights, w_stride, scale, bias, out_min, out_max) -> capsule (bias 0: none) */
static PyObject* py_q8_pack(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  long long a[7];
  if (!arity(nargs, 9, "q8_pack") || !ints(args, 7, a)) return NULL;
  const double lo = PyFloat_AsDouble(args[7]), hi = PyFloat_AsDouble(args[8]);
  if (PyErr_Occurred()) return NULL;
  pn_q8* layer;
  Py_BEGIN_ALLOW_THREADS
  layer = pn_q8_pack((int)a[0], a[1], a[2], (const int8_t*)(intptr_t)a[3], a[4], (const float*)(intptr_t)a[5],
                     (const float*)(intptr_t)a[6], (float)lo, (float)hi);
  Py_END_ALLOW_THREADS
  if (!layer) return PyErr_NoMemory();
  PyObject* capsule = PyCapsule_New(layer, Q8_CAPSULE, q8_destroy);
  if (!capsule) pn_q8_free(layer);
  return capsule;
}

static PyObject* py_q8_isa(PyObject* self, PyObject* capsule) {
  (void)self;
  const pn_q8* layer = PyCapsule_GetPointer(capsule, Q8_CAPSULE);
  return layer ? PyUnicode_FromString(pn_isa_name(pn_q8_isa(layer))) : NULL;
}

/* q8_run(layer, rows, x, x_stride, zero_point, scale, out, out_stride, threads) */
static PyObject* py_q8_run(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  long long a[8];
  if (!counted(nargs, 9, "q8_run") || !ints(args + 1, 8, a)) return spoiled();
  const pn_q8* layer = PyCapsule_GetPointer(args[0], Q8_CAPSULE);
  if (!layer) return spoiled();
  Py_BEGIN_ALLOW_THREADS
  pn_q8_run(layer, a[0], (const int8_t*)(intptr_t)a[1], a[2], (const float*)(intptr_t)a[3],
            (const float*)(intptr_t)a[4], (float*)(intptr_t)a[5], a[6], (int)a[7]);
  Py_END_ALLOW_THREADS
  recorded(PN_CALL_Q8_RUN, args[0], layer, a, 8, 0.0, 0.0);
  Py_RETURN_NONE;
}

#define QCONV_CAPSULE "pterun.xnnpack.qconv"

static void qconv_destroy(PyObject* capsule) { pn_qconv_free(PyCapsule_GetPointer(capsule, QCONV_CAPSULE)); }

/* qconv_pack(isa, groups, cin_g, cout_g, kh, kw, sh, sw, dh, dw, pt, pl, weights, scale, bias, input_zero_point,
 *            out_zero_point, qmin, qmax) -> capsule (bias 0: none) */
static PyObject* py_qconv_pack(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  long long a[19];
  if (!arity(nargs, 19, "qconv_pack") || !ints(args, 19, a)) return NULL;
  pn_qconv* layer;
  Py_BEGIN_ALLOW_THREADS
  layer = pn_qconv_pack((int)a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11],
                        (const int8_t*)(intptr_t)a[12], (const float*)(intptr_t)a[13],
                        (const int32_t*)(intptr_t)a[14], (int32_t)a[15], (int32_t)a[16], (int32_t)a[17],
                        (int32_t)a[18]);
  Py_END_ALLOW_THREADS
  if (!layer) return PyErr_NoMemory();
  PyObject* capsule = PyCapsule_New(layer, QCONV_CAPSULE, qconv_destroy);
  if (!capsule) pn_qconv_free(layer);
  return capsule;
}

static PyObject* py_qconv_isa(PyObject* self, PyObject* capsule) {
  (void)self;
  const pn_qconv* layer = PyCapsule_GetPointer(capsule, QCONV_CAPSULE);
  return layer ? PyUnicode_FromString(pn_isa_name(pn_qconv_isa(layer))) : NULL;
}

/* qconv_run(layer, n, h, w, x, oh, ow, y, threads) */
static PyObject* py_qconv_run(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  long long a[8];
  if (!counted(nargs, 9, "qconv_run") || !ints(args + 1, 8, a)) return spoiled();
  const pn_qconv* layer = PyCapsule_GetPointer(args[0], QCONV_CAPSULE);
  if (!layer) return spoiled();
  int status;
  Py_BEGIN_ALLOW_THREADS
  status = pn_qconv_run(layer, a[0], a[1], a[2], (const int8_t*)(intptr_t)a[3], a[4], a[5], (int8_t*)(intptr_t)a[6],
                        (int)a[7]);
  Py_END_ALLOW_THREADS
  if (status) {
    spoil();
    return PyErr_NoMemory();
  }
  recorded(PN_CALL_QCONV_RUN, args[0], layer, a, 8, 0.0, 0.0);
  Py_RETURN_NONE;
}

#define QBINARY_CAPSULE "pterun.xnnpack.qbinary"

static void qbinary_destroy(PyObject* capsule) { pn_qbinary_free(PyCapsule_GetPointer(capsule, QBINARY_CAPSULE)); }

/* qbinary_make(isa, op, ndim, geometry, a_param, b_param, bias, shift, scale, out_zero_point, qmin, qmax)
 * -> capsule */
static PyObject* py_qbinary_make(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  long long a[8], b[3];
  if (!arity(nargs, 12, "qbinary_make") || !ints(args, 8, a) || !ints(args + 9, 3, b)) return NULL;
  const double scale = PyFloat_AsDouble(args[8]);
  if (PyErr_Occurred()) return NULL;
  pn_qbinary* op = pn_qbinary_make((int)a[0], (int)a[1], (int)a[2], (const int64_t*)(intptr_t)a[3], (int32_t)a[4],
                                   (int32_t)a[5], (int32_t)a[6], (int32_t)a[7], (float)scale, (int32_t)b[0],
                                   (int32_t)b[1], (int32_t)b[2]);
  if (!op) {
    PyErr_SetString(PyExc_ValueError, "qbinary_make: more than 6 dimensions, an unknown op or a shift outside "
                                      "[0, 31] (or out of memory)");
    return NULL;
  }
  PyObject* capsule = PyCapsule_New(op, QBINARY_CAPSULE, qbinary_destroy);
  if (!capsule) pn_qbinary_free(op);
  return capsule;
}

static PyObject* py_qbinary_isa(PyObject* self, PyObject* capsule) {
  (void)self;
  const pn_qbinary* op = PyCapsule_GetPointer(capsule, QBINARY_CAPSULE);
  return op ? PyUnicode_FromString(pn_isa_name(pn_qbinary_isa(op))) : NULL;
}

/* qbinary_run(op, a, b, y, threads) */
static PyObject* py_qbinary_run(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  long long a[4];
  if (!counted(nargs, 5, "qbinary_run") || !ints(args + 1, 4, a)) return spoiled();
  const pn_qbinary* op = PyCapsule_GetPointer(args[0], QBINARY_CAPSULE);
  if (!op) return spoiled();
  Py_BEGIN_ALLOW_THREADS
  pn_qbinary_run(op, (const int8_t*)(intptr_t)a[0], (const int8_t*)(intptr_t)a[1], (int8_t*)(intptr_t)a[2], (int)a[3]);
  Py_END_ALLOW_THREADS
  recorded(PN_CALL_QBINARY_RUN, args[0], op, a, 4, 0.0, 0.0);
  Py_RETURN_NONE;
}

/* qmean_s8(x, y, n, h, w, c, scale, zero, qmin, qmax, threads) */
static PyObject* py_qmean_s8(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  long long a[6], b[3];
  if (!counted(nargs, 11, "qmean_s8") || !ints(args, 6, a) || !ints(args + 8, 3, b)) return spoiled();
  const double scale = PyFloat_AsDouble(args[6]), zero = PyFloat_AsDouble(args[7]);
  if (PyErr_Occurred()) return spoiled();
  int status;
  Py_BEGIN_ALLOW_THREADS
  status = pn_qmean_s8((const int8_t*)(intptr_t)a[0], (int8_t*)(intptr_t)a[1], a[2], a[3], a[4], a[5], (float)scale,
                       (float)zero, (int32_t)b[0], (int32_t)b[1], (int)b[2]);
  Py_END_ALLOW_THREADS
  if (status) {
    spoil();
    return PyErr_NoMemory();
  }
  const long long kept[9] = {a[0], a[1], a[2], a[3], a[4], a[5], b[0], b[1], b[2]};
  recorded(PN_CALL_QMEAN_S8, NULL, NULL, kept, 9, scale, zero);
  Py_RETURN_NONE;
}

/* qmaxpool_s8(x, y, n, h, w, c, oh, ow, window, qmin, qmax, threads) */
static PyObject* py_qmaxpool_s8(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  long long a[12];
  if (!counted(nargs, 12, "qmaxpool_s8") || !ints(args, 12, a)) return spoiled();
  Py_BEGIN_ALLOW_THREADS
  pn_qmaxpool_s8((const int8_t*)(intptr_t)a[0], (int8_t*)(intptr_t)a[1], a[2], a[3], a[4], a[5], a[6], a[7],
                 (const int64_t*)(intptr_t)a[8], (int32_t)a[9], (int32_t)a[10], (int)a[11]);
  Py_END_ALLOW_THREADS
  recorded(PN_CALL_QMAXPOOL_S8, NULL, NULL, a, 12, 0.0, 0.0);
  Py_RETURN_NONE;
}

/* vfamily_runs(family) -> bool */
static PyObject* py_vfamily_runs(PyObject* self, PyObject* family) {
  (void)self;
  const long f = PyLong_AsLong(family);
  if (f == -1 && PyErr_Occurred()) return NULL;
  return PyBool_FromLong(pn_vfamily_runs((int)f));
}

/* vunary(op, family, x, y, n, param, threads) */
static PyObject* py_vunary(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  long long a[5], t;
  if (!counted(nargs, 7, "vunary") || !ints(args, 5, a) || !ints(args + 6, 1, &t)) return spoiled();
  const double param = PyFloat_AsDouble(args[5]);
  if (PyErr_Occurred()) return spoiled();
  int status;
  Py_BEGIN_ALLOW_THREADS
  status = pn_vunary((int)a[0], (int)a[1], (const float*)(intptr_t)a[2], (float*)(intptr_t)a[3], a[4],
                     (float)param, (int)t);
  Py_END_ALLOW_THREADS
  if (status) {
    PyErr_Format(PyExc_ValueError, "vunary: op %lld or family %lld is unknown or does not run on this CPU", a[0],
                 a[1]);
    return spoiled();
  }
  const long long kept[6] = {a[0], a[1], a[2], a[3], a[4], t};
  recorded(PN_CALL_VUNARY, NULL, NULL, kept, 6, param, 0.0);
  Py_RETURN_NONE;
}

/* softmax(family, x, y, rows, cols, threads) */
static PyObject* py_softmax(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  long long a[6];
  if (!counted(nargs, 6, "softmax") || !ints(args, 6, a)) return spoiled();
  int status;
  Py_BEGIN_ALLOW_THREADS
  status = pn_softmax((int)a[0], (const float*)(intptr_t)a[1], (float*)(intptr_t)a[2], a[3], a[4], (int)a[5]);
  Py_END_ALLOW_THREADS
  if (status) {
    PyErr_Format(PyExc_ValueError, "softmax: family %lld does not run on this CPU, or rows of %lld", a[0], a[4]);
    return spoiled();
  }
  recorded(PN_CALL_SOFTMAX, NULL, NULL, a, 6, 0.0, 0.0);
  Py_RETURN_NONE;
}

/* dwconv(family, x, weights, bias, y, n, h, w, c, kh, kw, sh, sw, dh, dw, top, left, oh, ow, out_min, out_max,
 * threads) */
static PyObject* py_dwconv(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  long long a[20], t;
  if (!counted(nargs, 22, "dwconv") || !ints(args, 19, a) || !ints(args + 21, 1, &t)) return spoiled();
  const double lo = PyFloat_AsDouble(args[19]), hi = PyFloat_AsDouble(args[20]);
  if (PyErr_Occurred()) return spoiled();
  const pn_dwconv p = {(const float*)(intptr_t)a[1], (const float*)(intptr_t)a[2], (const float*)(intptr_t)a[3],
                       (float*)(intptr_t)a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13], a[14],
                       a[15], a[16], a[17], a[18], (float)lo, (float)hi};
  int status;
  Py_BEGIN_ALLOW_THREADS
  status = pn_dwconv_f32(&p, (int)a[0], (int)t);
  Py_END_ALLOW_THREADS
  if (status) {
    PyErr_Format(PyExc_ValueError, "dwconv: family %lld does not run on this CPU, or a negative size", a[0]);
    return spoiled();
  }
  recorded(PN_CALL_DWCONV, NULL, NULL, with_threads(a, t), 20, lo, hi);
  Py_RETURN_NONE;
}

/* conv(family, x, packed, y, n, h, w, cin, cout, kh, kw, sh, sw, dh, dw, top, left, oh, ow, out_min, out_max,
 * threads) */
static PyObject* py_conv(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  long long a[20], t;
  if (!counted(nargs, 22, "conv") || !ints(args, 19, a) || !ints(args + 21, 1, &t)) return spoiled();
  const double lo = PyFloat_AsDouble(args[19]), hi = PyFloat_AsDouble(args[20]);
  if (PyErr_Occurred()) return spoiled();
  const pn_conv p = {(const float*)(intptr_t)a[1], (const float*)(intptr_t)a[2], (float*)(intptr_t)a[3], a[4], a[5],
                     a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13], a[14], a[15], a[16], a[17], a[18],
                     (float)lo, (float)hi};
  int status;
  Py_BEGIN_ALLOW_THREADS
  status = pn_conv_f32(&p, (int)a[0], (int)t);
  Py_END_ALLOW_THREADS
  if (status == -2) {
    spoil();
    return PyErr_NoMemory();
  }
  if (status) {
    PyErr_Format(PyExc_ValueError, "conv: family %lld does not run on this CPU, a negative size, or a window of "
                 "more than 256 taps", a[0]);
    return spoiled();
  }
  recorded(PN_CALL_CONV, NULL, NULL, with_threads(a, t), 20, lo, hi);
  Py_RETURN_NONE;
}

/* copy_bytes(y, x, n): n bytes from x to y (an input copied into its planned memory); x may be y. */
static PyObject* py_copy_bytes(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  long long a[3];
  if (!arity(nargs, 3, "copy_bytes") || !ints(args, 3, a)) return NULL;
  if (a[2] < 0 || (a[2] > 0 && (a[0] == 0 || a[1] == 0))) {
    PyErr_SetString(PyExc_ValueError, "copy_bytes: a null pointer or a negative size");
    return NULL;
  }
  if (a[2] > 0) memmove((void*)(intptr_t)a[0], (const void*)(intptr_t)a[1], (size_t)a[2]);
  Py_RETURN_NONE;
}

/* copy_strided(x, y, elem, ndim, geometry, threads) */
static PyObject* py_copy_strided(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  long long a[6];
  if (!counted(nargs, 6, "copy_strided") || !ints(args, 6, a)) return spoiled();
  int status;
  Py_BEGIN_ALLOW_THREADS
  status = pn_copy_strided((const void*)(intptr_t)a[0], (void*)(intptr_t)a[1], (int)a[2], (int)a[3],
                           (const int64_t*)(intptr_t)a[4], (int)a[5]);
  Py_END_ALLOW_THREADS
  if (status) {
    PyErr_Format(PyExc_ValueError, "copy_strided: elements of %lld bytes or %lld dimensions", a[2], a[3]);
    return spoiled();
  }
  recorded(PN_CALL_COPY_STRIDED, NULL, NULL, a, 6, 0.0, 0.0);
  Py_RETURN_NONE;
}

/* vbinary(op, a, b, y, ndim, geometry, lo, hi, threads) */
static PyObject* py_vbinary(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  long long a[7];
  if (!counted(nargs, 9, "vbinary") || !ints(args, 6, a) || !ints(args + 8, 1, a + 6)) return spoiled();
  const double lo = PyFloat_AsDouble(args[6]), hi = PyFloat_AsDouble(args[7]);
  if (PyErr_Occurred()) return spoiled();
  int status;
  Py_BEGIN_ALLOW_THREADS
  status = pn_vbinary_f32((int)a[0], (const float*)(intptr_t)a[1], (const float*)(intptr_t)a[2],
                          (float*)(intptr_t)a[3], (int)a[4], (const int64_t*)(intptr_t)a[5], (float)lo, (float)hi,
                          (int)a[6]);
  Py_END_ALLOW_THREADS
  if (status) {
    PyErr_Format(PyExc_ValueError, "vbinary: op %lld or %lld dimensions", a[0], a[4]);
    return spoiled();
  }
  recorded(PN_CALL_VBINARY, NULL, NULL, a, 7, lo, hi);
  Py_RETURN_NONE;
}

/* sdpa(q, k, v, mask, out, batch, heads, kv_heads, q_len, kv_len, head_dim, q_strides (3), k_strides (3),
 * v_strides (3), out_strides (3), mask_stride, start_pos, causal, scale, threads) */
static PyObject* py_sdpa(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  long long a[26], t;
  if (!arity(nargs, 28, "sdpa") || !ints(args, 26, a) || !ints(args + 27, 1, &t)) return NULL;
  const double scale = PyFloat_AsDouble(args[26]);
  if (PyErr_Occurred()) return NULL;
  pn_attention attention = {
      .q = (const float*)(intptr_t)a[0], .k = (const float*)(intptr_t)a[1], .v = (const float*)(intptr_t)a[2],
      .mask = (const float*)(intptr_t)a[3], .out = (float*)(intptr_t)a[4], .batch = a[5], .heads = a[6],
      .kv_heads = a[7], .q_len = a[8], .kv_len = a[9], .head_dim = a[10], .q_stride = {a[11], a[12], a[13]},
      .k_stride = {a[14], a[15], a[16]}, .v_stride = {a[17], a[18], a[19]}, .out_stride = {a[20], a[21], a[22]},
      .mask_stride = a[23], .start_pos = a[24], .causal = (int)a[25], .scale = (float)scale};
  int status;
  Py_BEGIN_ALLOW_THREADS
  status = pn_sdpa(&attention, (int)t);
  Py_END_ALLOW_THREADS
  if (status == -2) return PyErr_NoMemory();
  if (status) {
    PyErr_Format(PyExc_ValueError, "sdpa: %lld query heads cannot share %lld key heads, or no keys", a[6], a[7]);
    return NULL;
  }
  Py_RETURN_NONE;
}

static PyObject* py_sdpa_blas(PyObject* self, PyObject* unused) {
  (void)self;
  (void)unused;
  return PyBool_FromLong(pn_sdpa_blas());
}

/* rms_norm(x, weight, out, rows, n, eps, lanes) */
static PyObject* py_rms_norm(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  long long a[5], lanes;
  if (!counted(nargs, 7, "rms_norm") || !ints(args, 5, a) || !ints(args + 6, 1, &lanes)) return spoiled();
  const double eps = PyFloat_AsDouble(args[5]);
  if (PyErr_Occurred()) return spoiled();
  if (pn_rms_norm((const float*)(intptr_t)a[0], (const float*)(intptr_t)a[1], (float*)(intptr_t)a[2], a[3], a[4],
                  (float)eps, (int)lanes)) {
    PyErr_Format(PyExc_ValueError, "rms_norm: rows of %lld values in vectors of %lld", a[4], lanes);
    return spoiled();
  }
  const long long kept[6] = {a[0], a[1], a[2], a[3], a[4], lanes};
  recorded(PN_CALL_RMS_NORM, NULL, NULL, kept, 6, eps, 0.0);
  Py_RETURN_NONE;
}

/* mean_f32(x, y, n, pixels, c, lo, hi, threads) */
static PyObject* py_mean_f32(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  long long a[6];
  if (!counted(nargs, 8, "mean_f32") || !ints(args, 5, a) || !ints(args + 7, 1, a + 5)) return spoiled();
  const double lo = PyFloat_AsDouble(args[5]), hi = PyFloat_AsDouble(args[6]);
  if (PyErr_Occurred()) return spoiled();
  if (a[3] <= 0 || a[2] < 0 || a[4] < 0) {
    PyErr_Format(PyExc_ValueError, "mean_f32: %lld images of %lld pixels and %lld channels", a[2], a[3], a[4]);
    return spoiled();
  }
  int status;
  Py_BEGIN_ALLOW_THREADS
  status = pn_mean_f32((const float*)(intptr_t)a[0], (float*)(intptr_t)a[1], a[2], a[3], a[4], (float)lo, (float)hi,
                       (int)a[5]);
  Py_END_ALLOW_THREADS
  if (status) {
    PyErr_NoMemory();
    return spoiled();
  }
  recorded(PN_CALL_MEAN_F32, NULL, NULL, a, 6, lo, hi);
  Py_RETURN_NONE;
}

/* layer_norm(x, weight, bias, y, mean, rstd, rows, n, eps, threads): weight and bias 0 for none */
static PyObject* py_layer_norm(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  long long a[9];
  if (!counted(nargs, 10, "layer_norm") || !ints(args, 8, a) || !ints(args + 9, 1, a + 8)) return spoiled();
  const double eps = PyFloat_AsDouble(args[8]);
  if (PyErr_Occurred()) return spoiled();
  int status;
  Py_BEGIN_ALLOW_THREADS
  status = pn_layer_norm((const float*)(intptr_t)a[0], (const float*)(intptr_t)a[1], (const float*)(intptr_t)a[2],
                         (float*)(intptr_t)a[3], (float*)(intptr_t)a[4], (float*)(intptr_t)a[5], a[6], a[7], (float)eps,
                         (int)a[8]);
  Py_END_ALLOW_THREADS
  if (status) {
    PyErr_Format(PyExc_ValueError, "layer_norm: %lld rows of %lld values (rows of 1 to %d)", a[6], a[7],
                 PN_LAYER_NORM_LONGEST - 1);
    return spoiled();
  }
  recorded(PN_CALL_LAYER_NORM, NULL, NULL, a, 9, eps, 0.0);
  Py_RETURN_NONE;
}

/* add_rms_norm(a, b, total, weight, out, rows, n, eps, lanes) */
static PyObject* py_add_rms_norm(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  long long a[7], lanes;
  if (!counted(nargs, 9, "add_rms_norm") || !ints(args, 7, a) || !ints(args + 8, 1, &lanes)) return spoiled();
  const double eps = PyFloat_AsDouble(args[7]);
  if (PyErr_Occurred()) return spoiled();
  if (pn_add_rms_norm((const float*)(intptr_t)a[0], (const float*)(intptr_t)a[1], (float*)(intptr_t)a[2],
                      (const float*)(intptr_t)a[3], (float*)(intptr_t)a[4], a[5], a[6], (float)eps, (int)lanes)) {
    PyErr_Format(PyExc_ValueError, "add_rms_norm: rows of %lld values in vectors of %lld", a[6], lanes);
    return spoiled();
  }
  const long long kept[8] = {a[0], a[1], a[2], a[3], a[4], a[5], a[6], lanes};
  recorded(PN_CALL_ADD_RMS_NORM, NULL, NULL, kept, 8, eps, 0.0);
  Py_RETURN_NONE;
}

/* silu_mul(g, u, sig, prod, out, n, lanes) */
static PyObject* py_silu_mul(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  long long a[7];
  if (!counted(nargs, 7, "silu_mul") || !ints(args, 7, a)) return spoiled();
  pn_silu_mul((const float*)(intptr_t)a[0], (const float*)(intptr_t)a[1], (float*)(intptr_t)a[2],
              (float*)(intptr_t)a[3], (float*)(intptr_t)a[4], a[5], (int)a[6]);
  recorded(PN_CALL_SILU_MUL, NULL, NULL, a, 7, 0.0, 0.0);
  Py_RETURN_NONE;
}

/* rotary_pairs(x, cos, sin, out, sizes (4), cos_strides (4), sin_strides (4)) */
static PyObject* py_rotary_pairs(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  long long a[16];
  if (!arity(nargs, 16, "rotary_pairs") || !ints(args, 16, a)) return NULL;
  const int64_t sizes[4] = {a[4], a[5], a[6], a[7]}, cs[4] = {a[8], a[9], a[10], a[11]},
                ss[4] = {a[12], a[13], a[14], a[15]};
  pn_rotary_pairs((const float*)(intptr_t)a[0], (const float*)(intptr_t)a[1], (const float*)(intptr_t)a[2],
                  (float*)(intptr_t)a[3], sizes, cs, ss);
  Py_RETURN_NONE;
}

#define CACHED_ATTENTION_CAPSULE "pterun.cached_attention"

static void cached_attention_destroy(PyObject* capsule) {
  free(PyCapsule_GetPointer(capsule, CACHED_ATTENTION_CAPSULE));
}

static void cache_write_of(const long long* a, pn_cache_write* w) {
  *w = (pn_cache_write){(const float*)(intptr_t)a[0], (float*)(intptr_t)a[1], a[2], a[3], a[4], a[5], a[6], a[7]};
}

static void rotary_of(const long long* a, pn_rotary* r) {
  *r = (pn_rotary){(const float*)(intptr_t)a[0], (const float*)(intptr_t)a[1], (const float*)(intptr_t)a[2],
                   (float*)(intptr_t)a[3], {a[4], a[5], a[6], a[7]}, {a[8], a[9], a[10], a[11]},
                   {a[12], a[13], a[14], a[15]}};
}

/* cached_attention_make(v_write (8), k_write (8), q_rotary (16), k_rotary (16), sdpa's first 26 arguments,
 * cache_len, scale): each write (src, cache, batch, seq, row, src_stride, cache_stride, cache_len), each rotary
 * rotary_pairs' arguments; a capsule for cached_attention_run. */
static PyObject* py_cached_attention_make(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  long long a[75];
  if (!arity(nargs, 76, "cached_attention_make") || !ints(args, 75, a)) return NULL;
  const double scale = PyFloat_AsDouble(args[75]);
  if (PyErr_Occurred()) return NULL;
  pn_cached_attention* c = malloc(sizeof *c);
  if (c == NULL) return PyErr_NoMemory();
  cache_write_of(a, &c->v_write);
  cache_write_of(a + 8, &c->k_write);
  rotary_of(a + 16, &c->q_rotary);
  rotary_of(a + 32, &c->k_rotary);
  const long long* s = a + 48;
  c->attention = (pn_attention){
      .q = (const float*)(intptr_t)s[0], .k = (const float*)(intptr_t)s[1], .v = (const float*)(intptr_t)s[2],
      .mask = (const float*)(intptr_t)s[3], .out = (float*)(intptr_t)s[4], .batch = s[5], .heads = s[6],
      .kv_heads = s[7], .q_len = s[8], .kv_len = s[9], .head_dim = s[10], .q_stride = {s[11], s[12], s[13]},
      .k_stride = {s[14], s[15], s[16]}, .v_stride = {s[17], s[18], s[19]}, .out_stride = {s[20], s[21], s[22]},
      .mask_stride = s[23], .start_pos = s[24], .causal = (int)s[25], .scale = (float)scale};
  c->cache_len = a[74];
  PyObject* capsule = PyCapsule_New(c, CACHED_ATTENTION_CAPSULE, cached_attention_destroy);
  if (!capsule) free(c);
  return capsule;
}

/* cached_attention_run(capsule, v_pos, k_pos, start_pos, threads): False where a position does not fit (nothing
 * written), else True. */
static PyObject* py_cached_attention_run(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  long long a[4];
  if (!counted(nargs, 5, "cached_attention_run") || !ints(args + 1, 4, a)) return spoiled();
  const pn_cached_attention* c = PyCapsule_GetPointer(args[0], CACHED_ATTENTION_CAPSULE);
  if (c == NULL) return spoiled();
  int status;
  Py_BEGIN_ALLOW_THREADS
  status = pn_cached_attention_run(c, a[0], a[1], a[2], (int)a[3]);
  Py_END_ALLOW_THREADS
  if (status == 1) {
    spoil();  /* the caller's steps take over */
    Py_RETURN_FALSE;
  }
  if (status == -2) {
    spoil();
    return PyErr_NoMemory();
  }
  if (status) {
    PyErr_SetString(PyExc_ValueError, "cached_attention: query heads the key heads do not divide, or no keys");
    return spoiled();
  }
  recorded(PN_CALL_CACHED_ATTENTION, args[0], c, a, 4, 0.0, 0.0);
  Py_RETURN_TRUE;
}

#define REPLAY_CAPSULE "pterun.replay"

static void recording_free(recording* r) {
  if (r == NULL) return;
  free(r->calls);
  Py_XDECREF(r->objects);
  free(r);
}

static void replay_destroy(PyObject* capsule) { recording_free(PyCapsule_GetPointer(capsule, REPLAY_CAPSULE)); }

/* record_start(): this thread's next calls are recorded (a recording it had is dropped). */
static PyObject* py_record_start(PyObject* self, PyObject* unused) {
  (void)self;
  (void)unused;
  recording* r = calloc(1, sizeof *r);
  if (r == NULL) return PyErr_NoMemory();
  r->objects = PyList_New(0);
  if (r->objects == NULL) {
    free(r);
    return NULL;
  }
  recording_free(recording_now);
  recording_now = r;
  Py_RETURN_NONE;
}

/* record_stop() -> the calls since record_start, for replay; None where one was spoiled, there were none, or this
 * thread was not recording. */
static PyObject* py_record_stop(PyObject* self, PyObject* unused) {
  (void)self;
  (void)unused;
  recording* r = recording_now;
  recording_now = NULL;
  if (r == NULL || r->spoiled || r->count == 0) {
    recording_free(r);
    Py_RETURN_NONE;
  }
  PyObject* capsule = PyCapsule_New(r, REPLAY_CAPSULE, replay_destroy);  /* the finished recording itself */
  if (capsule == NULL) recording_free(r);
  return capsule;
}

/* record_spoil(): a recording this thread makes is not kept (calls on values of the caller's own, a probe's). */
static PyObject* py_record_spoil(PyObject* self, PyObject* unused) {
  (void)self;
  (void)unused;
  spoil();
  Py_RETURN_NONE;
}

/* replay(recorded, *positions) -> bool: the recorded calls again, in one call, the k-th attention at positions
 * 3k..3k+2 (v_pos, k_pos, start_pos); False, having made none, where an attention refuses its positions. */
static PyObject* py_replay(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
  (void)self;
  spoil();
  if (nargs < 1) {
    PyErr_SetString(PyExc_TypeError, "replay takes a recording and its attentions' positions");
    return NULL;
  }
  const recording* r = PyCapsule_GetPointer(args[0], REPLAY_CAPSULE);
  if (r == NULL) return NULL;
  Py_ssize_t attentions = 0;
  for (Py_ssize_t i = 0; i < r->count; i++) attentions += r->calls[i].kind == PN_CALL_CACHED_ATTENTION;
  if (nargs - 1 != 3 * attentions) {
    PyErr_Format(PyExc_TypeError, "replay: the recording's %zd attentions take %zd positions, got %zd", attentions,
                 3 * attentions, nargs - 1);
    return NULL;
  }
  int64_t* positions = malloc((size_t)(3 * attentions + 1) * sizeof *positions);
  if (positions == NULL) return PyErr_NoMemory();
  for (Py_ssize_t i = 1; i < nargs; i++) {
    positions[i - 1] = PyLong_AsLongLong(args[i]);
    if (positions[i - 1] == -1 && PyErr_Occurred()) {
      free(positions);
      return NULL;
    }
  }
  int status;
  Py_BEGIN_ALLOW_THREADS
  status = pn_calls_run(r->calls, r->count, positions);
  Py_END_ALLOW_THREADS
  free(positions);
  if (status == 1) Py_RETURN_FALSE;
  if (status == -2) return PyErr_NoMemory();
  if (status) {
    PyErr_SetString(PyExc_ValueError, "replay: an attention failed that did not when it was recorded");
    return NULL;
  }
  Py_RETURN_TRUE;
}

static PyMethodDef methods[] = {
    {"q8_pack", (PyCFunction)(void (*)(void))py_q8_pack, METH_FASTCALL, "Packs an 8-bit layer."},
    {"q8_isa", py_q8_isa, METH_O, "The instruction set a packed 8-bit layer runs with."},
    {"q8_run", (PyCFunction)(void (*)(void))py_q8_run, METH_FASTCALL, "Runs a packed 8-bit layer."},
    {"cpu_isa", py_cpu_isa, METH_NOARGS, "The best instruction set this CPU runs the kernels with."},
    {"parallel_team", py_parallel_team, METH_NOARGS,
     "Whether kernels split work on PyTorch's OpenMP team (else on workers of their own)."},
    {"quantize_rows", (PyCFunction)(void (*)(void))py_quantize_rows, METH_FASTCALL, "XNNPACK's qd8 rows."},
    {"quantize_s8", (PyCFunction)(void (*)(void))py_quantize_s8, METH_FASTCALL, "XNNPACK's f32 -> qs8 convert."},
    {"dequantize_s8", (PyCFunction)(void (*)(void))py_dequantize_s8, METH_FASTCALL, "XNNPACK's qs8 -> f32 convert."},
    {"lookup_s8", (PyCFunction)(void (*)(void))py_lookup_s8, METH_FASTCALL, "A table of 256 8-bit values."},
    {"qb4w_start_sums", (PyCFunction)(void (*)(void))py_qb4w_start_sums, METH_FASTCALL,
     "XNNPACK's start values of a 4-bit block layer."},
    {"qb4w_pack", (PyCFunction)(void (*)(void))py_qb4w_pack, METH_FASTCALL, "Packs a 4-bit block layer."},
    {"qb4w_isa", py_qb4w_isa, METH_O, "The instruction set a packed layer runs with."},
    {"qb4w_run", (PyCFunction)(void (*)(void))py_qb4w_run, METH_FASTCALL, "Runs a packed 4-bit block layer."},
    {"qconv_pack", (PyCFunction)(void (*)(void))py_qconv_pack, METH_FASTCALL, "Packs an 8-bit convolution."},
    {"qconv_isa", py_qconv_isa, METH_O, "The instruction set a packed convolution runs with."},
    {"qconv_run", (PyCFunction)(void (*)(void))py_qconv_run, METH_FASTCALL, "Runs a packed 8-bit convolution."},
    {"qbinary_make", (PyCFunction)(void (*)(void))py_qbinary_make, METH_FASTCALL, "An 8-bit add or multiply."},
    {"qbinary_isa", py_qbinary_isa, METH_O, "The instruction set an 8-bit add or multiply runs with."},
    {"qbinary_run", (PyCFunction)(void (*)(void))py_qbinary_run, METH_FASTCALL, "Runs an 8-bit add or multiply."},
    {"qmean_s8", (PyCFunction)(void (*)(void))py_qmean_s8, METH_FASTCALL, "XNNPACK's 8-bit global mean."},
    {"qmaxpool_s8", (PyCFunction)(void (*)(void))py_qmaxpool_s8, METH_FASTCALL, "8-bit max pooling."},
    {"vfamily_runs", py_vfamily_runs, METH_O, "Whether this CPU runs a family of float kernels."},
    {"vunary", (PyCFunction)(void (*)(void))py_vunary, METH_FASTCALL, "XNNPACK's float elementwise kernels."},
    {"softmax", (PyCFunction)(void (*)(void))py_softmax, METH_FASTCALL, "XNNPACK's float softmax."},
    {"dwconv", (PyCFunction)(void (*)(void))py_dwconv, METH_FASTCALL, "XNNPACK's float depthwise convolution."},
    {"conv", (PyCFunction)(void (*)(void))py_conv, METH_FASTCALL,
     "XNNPACK's float dense convolution and fully connected product."},
    {"copy_bytes", (PyCFunction)(void (*)(void))py_copy_bytes, METH_FASTCALL, "Copies n bytes (memmove)."},
    {"copy_strided", (PyCFunction)(void (*)(void))py_copy_strided, METH_FASTCALL,
     "Moves elements between two strided regions."},
    {"vbinary", (PyCFunction)(void (*)(void))py_vbinary, METH_FASTCALL,
     "XNNPACK's float add, subtract, multiply or divide, broadcast, or a copy; clamped."},
    {"sdpa", (PyCFunction)(void (*)(void))py_sdpa, METH_FASTCALL, "ExecuTorch's float32 custom_sdpa."},
    {"sdpa_blas", py_sdpa_blas, METH_NOARGS, "Whether attention's products run in PyTorch's sgemm_."},
    {"rms_norm", (PyCFunction)(void (*)(void))py_rms_norm, METH_FASTCALL, "RMSNorm as PyTorch's CPU steps round it."},
    {"mean_f32", (PyCFunction)(void (*)(void))py_mean_f32, METH_FASTCALL, "XNNPACK's float global mean."},
    {"layer_norm", (PyCFunction)(void (*)(void))py_layer_norm, METH_FASTCALL,
     "Layer normalization of float32 rows shorter than 256 values, as ExecuTorch's portable kernel rounds it."},
    {"add_rms_norm", (PyCFunction)(void (*)(void))py_add_rms_norm, METH_FASTCALL,
     "A residual add and the RMSNorm of its sum, each rounded as PyTorch's."},
    {"silu_mul", (PyCFunction)(void (*)(void))py_silu_mul, METH_FASTCALL,
     "A SwiGLU's sigmoid and two products, each rounded as PyTorch's."},
    {"rotary_pairs", (PyCFunction)(void (*)(void))py_rotary_pairs, METH_FASTCALL,
     "The rotary embedding of interleaved pairs, each step rounded as PyTorch's."},
    {"cached_attention_make", (PyCFunction)(void (*)(void))py_cached_attention_make, METH_FASTCALL,
     "A layer's cache writes, rotary embeddings and attention, prepared for one call."},
    {"cached_attention_run", (PyCFunction)(void (*)(void))py_cached_attention_run, METH_FASTCALL,
     "Runs a prepared layer's cache writes, rotary embeddings and attention."},
    {"record_start", py_record_start, METH_NOARGS, "Records this thread's next calls, for replay."},
    {"record_stop", py_record_stop, METH_NOARGS, "The calls recorded since record_start, or None."},
    {"record_spoil", py_record_spoil, METH_NOARGS, "Drops what this thread records (calls on a probe's values)."},
    {"replay", (PyCFunction)(void (*)(void))py_replay, METH_FASTCALL, "Makes recorded calls again, in one call."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_kernels", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__kernels(void) { return PyModule_Create(&module); }
