/* A recorded run of native calls made again in one call: the same functions on the same pointers and sizes, in the
 * same order, as the Python functions that recorded them (module.c) made them; attentions at the positions given.
 * Every attention's positions are checked before the first call, so a refused run leaves every byte as it was. */
#include "native.h"

int pn_calls_run(const pn_call* calls, int64_t count, const int64_t* positions) {
  const int64_t* p = positions;
  for (int64_t i = 0; i < count; i++) {
    if (calls[i].kind != PN_CALL_CACHED_ATTENTION) continue;
    if (!pn_cached_attention_fits((const pn_cached_attention*)calls[i].object, p[0], p[1], p[2])) return 1;
    p += 3;
  }
  p = positions;
  for (int64_t i = 0; i < count; i++) {
    const pn_call* c = &calls[i];
    const int64_t* a = c->a;
    switch (c->kind) {
      case PN_CALL_QUANTIZE_ROWS:
        pn_quantize_rows((int)a[0], (const float*)(intptr_t)a[1], a[2], a[3], a[4], (int8_t*)(intptr_t)a[5], a[6],
                         (float*)(intptr_t)a[7], (float*)(intptr_t)a[8]);
        break;
      case PN_CALL_QB4W_RUN:
        pn_qb4w_run((const pn_qb4w*)c->object, a[0], (const int8_t*)(intptr_t)a[1], a[2],
                    (const float*)(intptr_t)a[3], (const float*)(intptr_t)a[4], (float*)(intptr_t)a[5], a[6],
                    (int)a[7]);
        break;
      case PN_CALL_Q8_RUN:
        pn_q8_run((const pn_q8*)c->object, a[0], (const int8_t*)(intptr_t)a[1], a[2], (const float*)(intptr_t)a[3],
                  (const float*)(intptr_t)a[4], (float*)(intptr_t)a[5], a[6], (int)a[7]);
        break;
      case PN_CALL_RMS_NORM:  /* its sizes were checked when it was recorded: it cannot fail here */
        (void)pn_rms_norm((const float*)(intptr_t)a[0], (const float*)(intptr_t)a[1], (float*)(intptr_t)a[2], a[3],
                          a[4], (float)c->f[0], (int)a[5]);
        break;
      case PN_CALL_ADD_RMS_NORM:
        (void)pn_add_rms_norm((const float*)(intptr_t)a[0], (const float*)(intptr_t)a[1], (float*)(intptr_t)a[2],
                              (const float*)(intptr_t)a[3], (float*)(intptr_t)a[4], a[5], a[6], (float)c->f[0],
                              (int)a[7]);
        break;
      case PN_CALL_SILU_MUL:
        pn_silu_mul((const float*)(intptr_t)a[0], (const float*)(intptr_t)a[1], (float*)(intptr_t)a[2],
                    (float*)(intptr_t)a[3], (float*)(intptr_t)a[4], a[5], (int)a[6]);
        break;
      case PN_CALL_QUANTIZE_S8:
        pn_quantize_s8((int)a[0], (const float*)(intptr_t)a[1], (int8_t*)(intptr_t)a[2], a[3], (float)c->f[0],
                       (int32_t)a[4], (int)a[5]);
        break;
      case PN_CALL_DEQUANTIZE_S8:
        pn_dequantize_s8((int)a[0], (const int8_t*)(intptr_t)a[1], (float*)(intptr_t)a[2], a[3], (int32_t)a[4],
                         (float)c->f[0], (int)a[5]);
        break;
      case PN_CALL_LOOKUP_S8:
        pn_lookup_s8((int)a[0], (const int8_t*)(intptr_t)a[1], (const int8_t*)(intptr_t)a[2], (int8_t*)(intptr_t)a[3],
                     a[4], (int)a[5]);
        break;
      case PN_CALL_QCONV_RUN:  /* it fails only where its scratch memory cannot be had */
        if (pn_qconv_run((const pn_qconv*)c->object, a[0], a[1], a[2], (const int8_t*)(intptr_t)a[3], a[4], a[5],
                         (int8_t*)(intptr_t)a[6], (int)a[7]))
          return -2;
        break;
      case PN_CALL_QBINARY_RUN:
        pn_qbinary_run((const pn_qbinary*)c->object, (const int8_t*)(intptr_t)a[0], (const int8_t*)(intptr_t)a[1],
                       (int8_t*)(intptr_t)a[2], (int)a[3]);
        break;
      case PN_CALL_QMEAN_S8:
        if (pn_qmean_s8((const int8_t*)(intptr_t)a[0], (int8_t*)(intptr_t)a[1], a[2], a[3], a[4], a[5],
                        (float)c->f[0], (float)c->f[1], (int32_t)a[6], (int32_t)a[7], (int)a[8]))
          return -2;
        break;
      case PN_CALL_QMAXPOOL_S8:
        pn_qmaxpool_s8((const int8_t*)(intptr_t)a[0], (int8_t*)(intptr_t)a[1], a[2], a[3], a[4], a[5], a[6], a[7],
                       (const int64_t*)(intptr_t)a[8], (int32_t)a[9], (int32_t)a[10], (int)a[11]);
        break;
      case PN_CALL_VUNARY:  /* its op and family ran when it was recorded: it cannot fail here */
        (void)pn_vunary((int)a[0], (int)a[1], (const float*)(intptr_t)a[2], (float*)(intptr_t)a[3], a[4],
                        (float)c->f[0], (int)a[5]);
        break;
      case PN_CALL_SOFTMAX:
        (void)pn_softmax((int)a[0], (const float*)(intptr_t)a[1], (float*)(intptr_t)a[2], a[3], a[4], (int)a[5]);
        break;
      case PN_CALL_DWCONV: {
        const pn_dwconv p = {(const float*)(intptr_t)a[1], (const float*)(intptr_t)a[2], (const float*)(intptr_t)a[3],
                             (float*)(intptr_t)a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13], a[14],
                             a[15], a[16], a[17], a[18], (float)c->f[0], (float)c->f[1]};
        (void)pn_dwconv_f32(&p, (int)a[0], (int)a[19]);
        break;
      }
      case PN_CALL_CONV: {
        const pn_conv p = {(const float*)(intptr_t)a[1], (const float*)(intptr_t)a[2], (float*)(intptr_t)a[3], a[4],
                           a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13], a[14], a[15], a[16], a[17], a[18],
                           (float)c->f[0], (float)c->f[1]};
        if (pn_conv_f32(&p, (int)a[0], (int)a[19])) return -2;  /* it ran when recorded: only memory can fail */
        break;
      }
      case PN_CALL_COPY_STRIDED:  /* its element size and rank were taken when it was recorded */
        (void)pn_copy_strided((const void*)(intptr_t)a[0], (void*)(intptr_t)a[1], (int)a[2], (int)a[3],
                              (const int64_t*)(intptr_t)a[4], (int)a[5]);
        break;
      case PN_CALL_VBINARY:
        (void)pn_vbinary_f32((int)a[0], (const float*)(intptr_t)a[1], (const float*)(intptr_t)a[2],
                             (float*)(intptr_t)a[3], (int)a[4], (const int64_t*)(intptr_t)a[5], (float)c->f[0],
                             (float)c->f[1], (int)a[6]);
        break;
      case PN_CALL_LAYER_NORM:  /* its length was checked when it was recorded */
        (void)pn_layer_norm((const float*)(intptr_t)a[0], (const float*)(intptr_t)a[1], (const float*)(intptr_t)a[2],
                            (float*)(intptr_t)a[3], (float*)(intptr_t)a[4], (float*)(intptr_t)a[5], a[6], a[7],
                            (float)c->f[0], (int)a[8]);
        break;
      case PN_CALL_MEAN_F32:  /* it fails only where its scratch memory cannot be had */
        if (pn_mean_f32((const float*)(intptr_t)a[0], (float*)(intptr_t)a[1], a[2], a[3], a[4], (float)c->f[0],
                        (float)c->f[1], (int)a[5]))
          return -2;
        break;
      case PN_CALL_CACHED_ATTENTION: {
        const int status = pn_cached_attention_run((const pn_cached_attention*)c->object, p[0], p[1], p[2], (int)a[3]);
        p += 3;
        if (status) return status;
        break;
      }
    }
  }
  return 0;
}
