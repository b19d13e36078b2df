"""LLM custom operators (``llama::*``, ``preprocess::tile_crop``), in plain torch.

ExecuTorch's LLM export replaces attention and the KV cache with these
operators. Their layouts and conventions are ExecuTorch's, not ATen's:

* attention tensors are ``[batch, seq, heads, head_dim]`` (sequence before
  heads), and a cache is ``[batch, max_seq, heads, head_dim]``;
* ``start_pos`` is the position of the query's first token: the query attends
  to the first ``start_pos + seq_len`` cache entries, causally when asked,
  and an explicit mask (2-d, float, ``[seq_len, max_seq]``) replaces both;
* grouped-query attention maps query head ``h`` to key/value head
  ``h // (heads / kv_heads)``.
"""

from __future__ import annotations

from pterun.kernels.llm import attention, cache, copies, delta_rule, hadamard
from pterun.kernels.python_kernels import register_kernels
from pterun.kernels.registry import KernelRegistry

KERNELS = (*attention.KERNELS, *cache.KERNELS, *delta_rule.KERNELS, *hadamard.KERNELS, *copies.KERNELS)


def register(registry: KernelRegistry) -> None:
    register_kernels(registry, KERNELS)
