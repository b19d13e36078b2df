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
                          a[4], (float)c->f, (int)a[5]);
        break;
      case PN_CALL_ADD_RMS_NORM:
        (void)pn_add_rms_norm((const float*)(intptr_t)a[0], (const float*)(intptr_t)a[1], (float*)(intptr_t)a[2],
                              (const float*)(intptr_t)a[3], (float*)(intptr_t)a[4], a[5], a[6], (float)c->f,
                              (int)a[7]);
        break;
      case PN_CALL_SILU_MUL:
        pn_silu_mul((const float*)(intptr_t)a[0], (const float*)(intptr_t)a[1], (float*)(intptr_t)a[2],
                    (float*)(intptr_t)a[3], (float*)(intptr_t)a[4], a[5], (int)a[6]);
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
