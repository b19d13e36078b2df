"""llama::gated_delta_rule and channelwise_gated_delta_rule: linear attention with a carried state."""

from __future__ import annotations

import torch

from pterun.errors import InvalidArgument
from pterun.kernels.python_kernels import F32, KernelTable, resize

KERNELS = KernelTable()


@KERNELS.kernel(
    "llama::gated_delta_rule.out(Tensor query, Tensor key, Tensor value, Tensor decay, Tensor beta, "
    "Tensor initial_state, *, Tensor(a!) out, Tensor(b!) final_state_out) -> (Tensor(a!), Tensor(b!))",
    "llama::channelwise_gated_delta_rule.out(Tensor query, Tensor key, Tensor value, Tensor decay, "
    "Tensor beta, Tensor initial_state, *, Tensor(a!) out, Tensor(b!) final_state_out) "
    "-> (Tensor(a!), Tensor(b!))")
def gated_delta_rule(query, key, value, decay, beta, initial_state, out, final_state_out):
    """Gated delta-rule linear attention, token by token.

    Per key/value head, with state S [K, V]: S' = diag(decay) S; delta = beta (v - S'^T k);
    S = S' + k delta^T; each query head of the group reads o = S^T q.
    """
    what = "gated_delta_rule"
    tensors = (query, key, value, decay, beta, initial_state)
    if any(t.dim() != 4 for t in (query, key, value, initial_state)) or decay.dim() not in (3, 4) \
            or beta.dim() != 3:
        raise InvalidArgument(f"{what}: expected 4-d query/key/value/state, 3-d beta and 3-d or 4-d decay")
    if any(t.dtype != F32 for t in tensors) or out.dtype != F32 or final_state_out.dtype != F32:
        raise InvalidArgument(f"{what}: all tensors must be float32")
    batch, heads, steps, k_dim = query.shape
    kv_heads, v_dim = key.shape[1], value.shape[3]
    if key.shape[0] != batch or key.shape[2:] != (steps, k_dim) or value.shape[:3] != key.shape[:3] \
            or beta.shape != key.shape[:3] or decay.shape[:3] != key.shape[:3] \
            or (decay.dim() == 4 and decay.shape[3] != k_dim) \
            or initial_state.shape != (batch, kv_heads, k_dim, v_dim) or kv_heads == 0 or heads % kv_heads:
        raise InvalidArgument(f"{what}: inconsistent shapes")
    if initial_state.numel() and final_state_out.numel() and \
            initial_state.untyped_storage().data_ptr() == final_state_out.untyped_storage().data_ptr():
        begin_a, begin_b = initial_state.data_ptr(), final_state_out.data_ptr()
        if begin_a < begin_b + final_state_out.nbytes and begin_b < begin_a + initial_state.nbytes:
            raise InvalidArgument(f"{what}: final_state_out must not alias initial_state")
    resize(out, (batch, heads, steps, v_dim))
    resize(final_state_out, initial_state.shape)
    reps = heads // kv_heads
    state = initial_state.clone()
    outputs = []
    for t in range(steps):
        d = decay[:, :, t].unsqueeze(-1) if decay.dim() == 4 else decay[:, :, t, None, None]
        k_t = key[:, :, t]
        decayed = state * d
        predicted = torch.einsum("bhk,bhkv->bhv", k_t, decayed)
        delta = (value[:, :, t] - predicted) * beta[:, :, t, None]
        state = decayed + k_t.unsqueeze(-1) * delta.unsqueeze(-2)
        q_t = query[:, :, t].reshape(batch, kv_heads, reps, k_dim)
        outputs.append(torch.einsum("bhrk,bhkv->bhrv", q_t, state).reshape(batch, heads, v_dim))
    if steps:
        out.copy_(torch.stack(outputs, dim=2))
    final_state_out.copy_(state)
    return out, final_state_out
