/* One layer's attention over a KV cache as ExecuTorch's Llama export writes it, in one call: the value rows
 * written into their cache, the rotary embedding of the queries and of the keys, the rotated keys written into
 * theirs, and custom_sdpa over both caches. The same kernels the steps call one by one (pn_rotary_pairs,
 * pn_sdpa, a copy of rows), in the steps' order and on the same bytes, so the results are theirs bit for bit
 * whatever the memory plan shares between them. Every position is checked before anything is written: a call
 * refused leaves every byte as it was, for the steps to run (and refuse) one by one. */
#include <stdlib.h>
#include <string.h>

#include "native.h"

static void write_rows(const pn_cache_write* w, int64_t pos) {
  const size_t bytes = (size_t)(w->seq * w->row) * sizeof(float);
  for (int64_t b = 0; b < w->batch; b++)
    memcpy(w->cache + b * w->cache_stride + pos * w->row, w->src + b * w->src_stride, bytes);
}

static int fits(const pn_cache_write* w, int64_t pos) {
  return pos >= 0 && pos < w->cache_len && pos + w->seq <= w->cache_len;
}

int pn_cached_attention_fits(const pn_cached_attention* c, int64_t v_pos, int64_t k_pos, int64_t start_pos) {
  const int64_t keys = start_pos + c->attention.q_len;
  return fits(&c->v_write, v_pos) && fits(&c->k_write, k_pos) && start_pos >= 0 && keys > 0 && keys <= c->cache_len &&
         keys < ((int64_t)1 << 31);
}

int pn_cached_attention_run(const pn_cached_attention* c, int64_t v_pos, int64_t k_pos, int64_t start_pos,
                        int threads) {
  if (!pn_cached_attention_fits(c, v_pos, k_pos, start_pos)) return 1;
  const int64_t keys = start_pos + c->attention.q_len;
  write_rows(&c->v_write, v_pos);
  pn_rotary_pairs(c->q_rotary.x, c->q_rotary.cos, c->q_rotary.sin, c->q_rotary.out, c->q_rotary.sizes,
                  c->q_rotary.cos_strides, c->q_rotary.sin_strides);
  pn_rotary_pairs(c->k_rotary.x, c->k_rotary.cos, c->k_rotary.sin, c->k_rotary.out, c->k_rotary.sizes,
                  c->k_rotary.cos_strides, c->k_rotary.sin_strides);
  write_rows(&c->k_write, k_pos);
  pn_attention a = c->attention;
  a.start_pos = start_pos;
  a.kv_len = keys;
  return pn_sdpa(&a, threads);
}
