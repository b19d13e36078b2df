"""Kernels for chains of operators the exporter decomposed, run as one call again (executor/load/fuse/).

Each is a device-agnostic torch call with an ``out`` variant, as the executor's
code calls kernels, and a pure form for ``torch.compile``. Their results
differ from the decomposed chain's only by rounding (docs/precision.md).
"""

from __future__ import annotations

import functools

import torch
from torch.nn.functional import scaled_dot_product_attention

from pterun import native

F32 = torch.float32
# Torch's sum over a row of at least this many values splits the row over threads (its reductions' grain size),
# which changes the order the native RMSNorm follows: such rows take torch's steps.
_TORCH_GRAIN = 32768


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale_q: float, scale_k: float,
              mask: torch.Tensor | None = None) -> torch.Tensor:
    """softmax(q*scale_q @ (k*scale_k)^T + mask) @ v, with batch and head dimensions flattened, as ``bmm`` left
    them; a row the mask hides entirely is zeros, as the exporter's safe softmax makes it."""
    if q.shape[-2] == 1 and q.is_cuda and q.dtype == torch.float32:
        return _one_query(q, k, v, scale_q * scale_k, mask)
    return scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale_q * scale_k).flatten(0, -3)


def _one_query(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
               mask: torch.Tensor | None) -> torch.Tensor:
    """A decode step's float32 attention (one query per head) on CUDA as its products and a softmax: PyTorch's
    fused kernels tile queries by 64 and take float32 only in the memory-efficient kernel, which spent 59 us
    per call on an H100 over 12 heads of 512 keys, half of a compiled 100M decode step. Float32 throughout, as
    the decomposed chain computes it."""
    scores = torch.matmul(q, k.transpose(-1, -2)) * scale
    return torch.matmul(_safe_softmax(scores, mask), v).flatten(0, -3)


def _safe_softmax(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    if mask is None:
        return torch.softmax(scores, -1)
    scores = scores + mask
    # A row the mask hides entirely is zeros, as the exporter's safe softmax makes it (torch._safe_softmax
    # does the same, but torch.compile will not trace it); a row of NaN stays NaN.
    hidden = scores.amax(-1, keepdim=True) == -torch.inf
    return torch.softmax(scores, -1).masked_fill(hidden, 0.0)


def grouped_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale_q: float, scale_k: float,
                      mask: torch.Tensor | None = None) -> torch.Tensor:
    """``attention`` where each head of ``k`` and ``v`` serves a group of ``q``'s heads (grouped-query attention),
    cast to ``q``'s dtype: the exporter's repeat of a cache for the query heads (transformers' ``repeat_kv``: a
    whole-cache copy per layer and step, and another for the cast) made here. On the CPU PyTorch's kernel maps
    each query head to its shared one (``enable_gqa``: the repeated heads' result, bit for bit); a decode step on
    CUDA reads each cached head once for its group; elsewhere the heads are repeated (the values the exported
    steps make, so the result is ``attention``'s)."""
    groups = q.shape[-3] // k.shape[-3]
    if q.device.type == "cpu":
        return scaled_dot_product_attention(q, k.to(q.dtype), v.to(q.dtype), attn_mask=mask, scale=scale_q * scale_k,
                                            enable_gqa=True).flatten(0, -3)
    if q.shape[-2] == 1 and q.is_cuda and q.dtype == F32:
        return _one_query_grouped(q, k, v, scale_q * scale_k, mask, groups)
    return attention(q, _repeat(k, groups, q.dtype), _repeat(v, groups, q.dtype), scale_q, scale_k, mask)


def _repeat(x: torch.Tensor, groups: int, dtype: torch.dtype) -> torch.Tensor:
    *batch, heads, length, e = x.shape
    return x.to(dtype).unsqueeze(-3).expand(*batch, heads, groups, length, e).reshape(*batch, heads * groups, length, e)


def _one_query_grouped(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, mask: torch.Tensor | None,
                       groups: int) -> torch.Tensor:
    """``_one_query`` with the group's queries as the rows of one product against their shared head."""
    *batch, heads, _, e = q.shape
    shared, length, ev = k.shape[-3], k.shape[-2], v.shape[-1]
    scores = torch.matmul(q.reshape(*batch, shared, groups, e), k.to(F32).transpose(-1, -2))
    probs = _safe_softmax(scores.reshape(*batch, heads, 1, length) * scale, mask)
    out = torch.matmul(probs.reshape(*batch, shared, groups, length), v.to(F32))
    return out.reshape(*batch, heads, 1, ev).flatten(0, -3)


def grouped_attention_traced(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale_q: float, scale_k: float,
                             mask: torch.Tensor | None = None) -> torch.Tensor:
    """``grouped_attention`` as ``torch.compile`` traces it (its functional form): a CUDA decode step's two
    products as sums of broadcast products, which TorchInductor makes reductions that read the cache in its own
    dtype, cast on the way. cuBLAS took 13 us for a layer's product of 4 queries' weights by 512 cached values
    (a 1B decoder on an H100, 16 layers: a sixth of the step) and each cast a kernel of its own. Float32
    throughout; the sums' order is Inductor's."""
    if q.shape[-2] == 1 and q.is_cuda and q.dtype == F32:
        return _one_query_reduced(q, k, v, scale_q * scale_k, mask, q.shape[-3] // k.shape[-3])
    return grouped_attention(q, k, v, scale_q, scale_k, mask)


def _one_query_reduced(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, mask: torch.Tensor | None,
                       groups: int) -> torch.Tensor:
    *batch, heads, _, e = q.shape
    shared, length, ev = k.shape[-3], k.shape[-2], v.shape[-1]
    scores = (q.reshape(*batch, shared, groups, 1, e) * k.unsqueeze(-3)).sum(-1)
    probs = _safe_softmax(scores.reshape(*batch, heads, 1, length) * scale, mask)
    out = (probs.reshape(*batch, shared, groups, length, 1) * v.unsqueeze(-3)).sum(-2)
    return out.reshape(*batch, heads, 1, ev).flatten(0, -3)


def grouped_attention_out(q, k, v, scale_q, scale_k, mask=None, *, out: torch.Tensor) -> torch.Tensor:
    return _into(out, grouped_attention(q, k, v, scale_q, scale_k, mask))


def _into(out: torch.Tensor, result: torch.Tensor) -> torch.Tensor:
    # A dynamic out arrives emptied (the executor sizes outputs as the kernels do): sized here, within its bound.
    if out.shape != result.shape:
        out.resize_(result.shape)
    return out.copy_(result)


def attention_out(q, k, v, scale_q, scale_k, mask=None, *, out: torch.Tensor) -> torch.Tensor:
    return _into(out, attention(q, k, v, scale_q, scale_k, mask))


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """weight * (x * rsqrt(mean(x^2, -1) + eps))."""
    return torch.rms_norm(x, (x.shape[-1],), weight, eps)


class NativeCall:
    """A kernel that makes one native call where its tensors allow, and says whether its last call was that call
    alone: a run of such calls recorded once is made again in one native call (executor/codegen/replay.py).
    ``replayed``: the positional arguments the native call takes anew on every call (an attention's positions), in
    the order it takes them; the others the replay takes as they were."""

    _ran_natively = False
    replayed: tuple[int, ...] = ()

    def ran_natively(self) -> bool:
        return self._ran_natively


class RmsNormInto(NativeCall):
    """``rms_norm`` written into ``out``. In float32 on the CPU as the chain's own steps (x * x, its mean, + eps,
    rsqrt, the products), which are torch.rms_norm's there too, bit for bit: in one native call where pterun's
    native kernels are built (``native/fused.c``: each step as torch's CPU kernel rounds it, the mean's sum in
    its order, checked against torch in the process before it is taken), else as six torch calls into buffers
    kept for the bytes x is passed in (as ``RotaryInto`` keeps its own), no allocation per call either way.
    Elsewhere torch.rms_norm: device kernels that fuse the steps, and for half types sums in float32."""

    def __init__(self) -> None:
        self._key: tuple = ()
        self._views: tuple = ()
        self._native: tuple | None = None  # the native call's arguments for the key, or None: torch's steps

    def __call__(self, x: torch.Tensor, weight: torch.Tensor, eps: float, *, out: torch.Tensor) -> torch.Tensor:
        self._ran_natively = False
        if x.device.type != "cpu" or x.dtype != F32 or weight.dtype != F32:
            return _into(out, rms_norm(x, weight, eps))
        if out.shape != x.shape:
            out.resize_(x.shape)
        key = (x.data_ptr(), x.shape, x.stride(), weight.data_ptr(), weight.stride(), out.data_ptr(), out.stride(),
               eps)
        if key != self._key:
            (self._views, self._native), self._key = self._prepare(x, weight, eps, out), key
        if self._native is not None:
            native.kernels.rms_norm(*self._native)  # type: ignore[union-attr]
            self._ran_natively = True
            return out
        return _torch_steps(x, weight, eps, self._views, out)

    @staticmethod
    def _prepare(x: torch.Tensor, weight: torch.Tensor, eps: float, out: torch.Tensor) -> tuple[tuple, tuple | None]:
        """The buffers of torch's steps, and the native call's arguments where it takes these tensors: rows
        contiguous, the weight one contiguous row, out x itself or bytes apart from it."""
        n = x.shape[-1] if x.dim() else 0
        lanes = _rms_norm_lanes()
        if (lanes and lanes <= n < _TORCH_GRAIN and x.is_contiguous() and out.is_contiguous()
                and weight.shape == (n,) and weight.is_contiguous() and weight.device.type == "cpu"
                and (out.data_ptr() == x.data_ptr() or apart(out, x)) and apart(out, weight)):
            return (), (x.data_ptr(), weight.data_ptr(), out.data_ptr(), x.numel() // n, n, eps, lanes)
        return (torch.empty_like(x), torch.empty((*x.shape[:-1], 1), dtype=x.dtype)), None


class AddRmsNormInto(NativeCall):
    """``a + b`` written into ``total`` and its ``rms_norm`` into ``out``: a residual stream's add and the norm that
    reads it (executor/load/fuse/add_rms_norm.py). In float32 on the CPU one native call (``native/fused.c``: the
    sum, then ``RmsNormInto``'s native steps) where the operands are contiguous, of one shape, and their bytes allow
    it, on arguments kept for the tensors of the call before (a method passes the same planned tensors at every
    call, so a call compares their addresses and shapes); else ``torch.add`` and ``RmsNormInto``, the steps' own
    calls."""

    def __init__(self) -> None:
        self._norm = RmsNormInto()
        self._key: tuple = ()
        self._native: tuple | None = None

    def __call__(self, a: torch.Tensor, b: torch.Tensor, weight: torch.Tensor, eps: float, *, total: torch.Tensor,
                 out: torch.Tensor) -> torch.Tensor:
        self._ran_natively = False
        kernels = native.kernels
        if (kernels is not None and a.dtype is F32 and b.dtype is F32 and weight.dtype is F32 and total.dtype is F32
                and out.dtype is F32):
            if _add_rms_norm_key(a, b, weight, eps, total, out) != self._key:
                self._native = _add_rms_norm_arguments(a, b, weight, eps, total, out)
                self._key = _add_rms_norm_key(a, b, weight, eps, total, out)
            if self._native is not None:
                kernels.add_rms_norm(*self._native)
                self._ran_natively = True
                return out
        if total.shape != torch.broadcast_shapes(a.shape, b.shape):
            total.resize_(0)  # as the executor empties a dynamic out before torch writes it
        torch.add(a, b, out=total)
        if not total.is_contiguous():  # torch gives an emptied out an input's strides; the plan's are contiguous
            values = total.contiguous()
            total.as_strided_(total.shape, values.stride())
            total.copy_(values)
        return self._norm(total, weight, eps, out=out)


def _add_rms_norm_key(a: torch.Tensor, b: torch.Tensor, weight: torch.Tensor, eps: float, total: torch.Tensor,
                      out: torch.Tensor) -> tuple:
    """What the native call's arguments are made of: addresses, shapes, and the layouts they assume."""
    return (a.data_ptr(), b.data_ptr(), total.data_ptr(), weight.data_ptr(), out.data_ptr(), a.shape, b.shape,
            total.shape, weight.shape, out.shape, eps, a.is_contiguous(), b.is_contiguous(), total.is_contiguous(),
            out.is_contiguous(), weight.is_contiguous())


def _add_rms_norm_arguments(a: torch.Tensor, b: torch.Tensor, weight: torch.Tensor, eps: float, total: torch.Tensor,
                            out: torch.Tensor) -> tuple | None:
    """The native call's arguments for these tensors, or None: float32 on the CPU, a and b of one shape and
    contiguous, ``total`` and ``out`` sized (as the steps size them) and laid out to match, bytes apart where the
    kernel reads while it writes (pn_add_rms_norm's rules)."""
    lanes = _rms_norm_lanes()
    n = a.shape[-1] if a.dim() else 0
    if not (lanes and lanes <= n < _TORCH_GRAIN and a.shape == b.shape and a.is_contiguous() and b.is_contiguous()
            and all(t.dtype is F32 and t.device.type == "cpu" for t in (b, weight, total, out))
            and weight.shape == (n,) and weight.is_contiguous()):
        return None
    for t in (total, out):
        if t.shape != a.shape:
            t.resize_(a.shape)
    if not (total.is_contiguous() and out.is_contiguous()):
        return None
    if not all(total.data_ptr() == t.data_ptr() or apart(total, t) for t in (a, b)) or not apart(total, weight):
        return None
    # The sum is whole before the norm writes: out may take the operands' bytes, as the plan gives it theirs.
    if not (out.data_ptr() == total.data_ptr() or apart(out, total)) or not apart(out, weight):
        return None
    return (a.data_ptr(), b.data_ptr(), total.data_ptr(), weight.data_ptr(), out.data_ptr(), a.numel() // n, n, eps,
            lanes)


def _torch_steps(x: torch.Tensor, weight: torch.Tensor, eps: float, views: tuple, out: torch.Tensor) -> torch.Tensor:
    """RMSNorm as the exporter's six steps, into ``views`` (x's size, and one value per row) and ``out``."""
    scaled, mean = views
    torch.mul(x, x, out=scaled)
    torch.mean(scaled, -1, keepdim=True, out=mean)
    mean.add_(eps).rsqrt_()
    torch.mul(x, mean, out=scaled)
    return torch.mul(scaled, weight, out=out)


FUSED_ON_THE_CPU = ("pterun::rms_norm", "pterun::rotary")  # the chains that take the native calls below


def route() -> str:
    """How float32 RMSNorm and rotary chains run on the CPU in this process, in a sentence."""
    if native.kernels is None:
        return f"PyTorch's steps ({native.missing})"
    lanes = _rms_norm_lanes()
    if not lanes:
        return "rotary in pterun's native code; RMSNorm in PyTorch's steps (no native sum order matched PyTorch's here)"
    return f"pterun's native code, each step rounded as PyTorch's (the mean summed in its order, by {lanes} floats)"


@functools.cache
def _rms_norm_lanes() -> int:
    """The vector width (floats) whose cascade order makes the native RMSNorm torch's steps bit for bit in this
    process, 0 where none does or the native kernels are not built. Torch's sum kernel runs its AVX2 build on
    AVX-512 CPUs too (8 floats); the probe decides rather than the CPU's name."""
    kernels = native.kernels
    if kernels is None:
        return 0
    kernels.record_spoil()  # calls on the probe's own values, which no replay may make again
    generator = torch.Generator().manual_seed(0)
    rows = [(torch.randn(r, n, generator=generator) * scale, torch.randn(n, generator=generator))
            for r, n, scale in ((1, 768, 1.0), (3, 64, 30.0), (2, 4096, 1e-3), (5, 100, 1.0), (1, 2047, 3.0))]
    for lanes in (8, 16, 4):
        for x, weight in rows:
            views = (torch.empty_like(x), torch.empty((x.shape[0], 1)))
            expected = _torch_steps(x, weight, 1e-5, views, torch.empty_like(x))
            actual = torch.empty_like(x)
            kernels.rms_norm(x.data_ptr(), weight.data_ptr(), actual.data_ptr(), x.shape[0], x.shape[1], 1e-5, lanes)
            if not torch.equal(actual, expected):
                break
        else:
            return lanes
    return 0


class SiluMulInto(NativeCall):
    """``gate * sigmoid(gate) * up`` into the outs of the steps it replaces (executor/load/fuse/silu_mul.py): ``sig``,
    ``prod`` and ``out``. In float32 on the CPU one native call (``native/silu.c``: the three steps value for value
    as PyTorch's kernels compute them, checked against PyTorch in the process before it is taken) where the
    tensors are contiguous, of one shape, and their bytes let it compute each value's three steps in turn; else
    the steps' three torch calls. Outs keep their shape from call to call; where it changes, each is emptied before
    its call and made contiguous after it, as the executor does for the steps."""

    def __init__(self) -> None:
        self._key: tuple = ()
        self._native: tuple | None = None

    def __call__(self, gate: torch.Tensor, up: torch.Tensor, *, sig: torch.Tensor, prod: torch.Tensor,
                 out: torch.Tensor) -> torch.Tensor:
        self._ran_natively = False
        shape = gate.shape
        if (up.shape == shape and sig.shape == shape and prod.shape == shape and out.shape == shape
                and sig.is_contiguous() and prod.is_contiguous() and out.is_contiguous()):
            kernels = native.kernels
            if kernels is not None and gate.dtype is F32:
                key = (gate.data_ptr(), up.data_ptr(), sig.data_ptr(), prod.data_ptr(), out.data_ptr(), shape,
                       gate.is_contiguous(), up.is_contiguous(), up.dtype, sig.dtype, prod.dtype, out.dtype)
                if key != self._key:
                    self._native, self._key = _silu_mul_arguments(gate, up, sig, prod, out), key
                native_call = self._native
                # PyTorch splits a long row over its threads, and each part's last values take its scalar path.
                if native_call is not None and (native_call[5] < _TORCH_GRAIN or torch.get_num_threads() == 1):
                    kernels.silu_mul(*native_call)
                    self._ran_natively = True
                    return out
            torch.sigmoid(gate, out=sig)
            torch.mul(gate, sig, out=prod)
            return torch.mul(prod, up, out=out)
        _emptied_into(torch.sigmoid, (gate,), sig)
        _emptied_into(torch.mul, (gate, sig), prod)
        return _emptied_into(torch.mul, (prod, up), out)


def _silu_mul_arguments(gate: torch.Tensor, up: torch.Tensor, sig: torch.Tensor, prod: torch.Tensor,
                        out: torch.Tensor) -> tuple | None:
    """The native call's arguments, or None: float32 contiguous tensors on the CPU (of one shape: the caller's check),
    no out over bytes a later step reads (the call computes each value's three steps before the next value's), the
    outs each other's bytes or apart."""
    lanes = _sigmoid_lanes()
    tensors = (gate, up, sig, prod, out)
    if not lanes or not all(t.dtype is F32 and t.device.type == "cpu" and t.is_contiguous() for t in tensors):
        return None
    def same_or_apart(a: torch.Tensor, b: torch.Tensor) -> bool:
        return a.data_ptr() == b.data_ptr() or apart(a, b)
    if not (apart(sig, gate) and apart(sig, up) and apart(prod, up) and same_or_apart(prod, gate)
            and same_or_apart(out, gate) and same_or_apart(out, up) and same_or_apart(sig, prod)
            and same_or_apart(sig, out) and same_or_apart(prod, out)):
        return None
    return (gate.data_ptr(), up.data_ptr(), sig.data_ptr(), prod.data_ptr(), out.data_ptr(), gate.numel(), lanes)


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    # A NaN's sign after a product of two NaNs is whichever operand the compiler put first (torch's too): NaNs match.
    return bool(((a.view(torch.int32) == b.view(torch.int32)) | (a.isnan() & b.isnan())).all())


@functools.cache
def _sigmoid_lanes() -> int:
    """The vector width (floats) whose split between SLEEF's exp and libm's makes the native SiLU-product torch's
    steps bit for bit in this process (PyTorch's vectors on this CPU), 0 where none does or the native kernels are
    not built. Decided on values of every range, exp's edges included, and on values the two exps round apart
    (about one in 25), at a length ending where whole pairs of 8 and of 16 end apart; NaNs agree as NaNs."""
    kernels = native.kernels
    if kernels is None:
        return 0
    kernels.record_spoil()  # calls on the probe's own values, which no replay may make again
    generator = torch.Generator().manual_seed(0)
    edges = torch.tensor([0.0, -0.0, 1e-30, -1e-30, 88.0, -88.0, 87.3, -87.3, 103.9, -103.9, 104.0, -104.0, 100.0,
                          -100.0, 100.1, -100.1, 1e10, -1e10, float("inf"), float("-inf"), float("nan")])
    gate = torch.cat([torch.randn(4093, generator=generator) * scale for scale in (1.0, 8.0, 40.0, 120.0)] + [edges])

    def native_sigmoid(g: torch.Tensor, lanes: int) -> list[torch.Tensor]:
        got = [torch.empty(g.numel()) for _ in range(3)]
        kernels.silu_mul(g.data_ptr(), up[:g.numel()].data_ptr(), *(t.data_ptr() for t in got), g.numel(), lanes)
        return got

    up = torch.randn(gate.numel(), generator=generator)
    apart_paths = gate[native_sigmoid(gate, 16)[0].view(torch.int32) != native_sigmoid(gate, 0)[0].view(torch.int32)]
    if apart_paths.numel() < 61:  # too few to tell the widths apart
        return 0
    for lanes in (16, 8):
        for g in (gate, gate[:2048], apart_paths[:61], apart_paths[:15]):
            g = g.clone()
            sig = torch.sigmoid(g)
            expected = (sig, torch.mul(g, sig), torch.mul(torch.mul(g, sig), up[:g.numel()]))
            if not all(_same_bits(a, b) for a, b in zip(native_sigmoid(g, lanes), expected)):
                break
        else:
            return lanes
    return 0


class ZeroHiddenRows:
    """``probs`` with each row whose ``scores`` are all -inf (a row the mask hides entirely) made zeros
    (executor/load/fuse/hidden_rows.py), in three calls into outs of the steps it replaces: ``hidden``, where a
    score is -inf; ``rows``, where all of a row's are (``not any(not ...)``, as the steps compute it); ``out``. The
    steps' values, bit for bit: a 0 of the probabilities' dtype or their value. Where a shape changes, each out is
    emptied before its call, as the executor does for the steps."""

    def __init__(self, zero: torch.Tensor) -> None:
        self.zero = zero  # the 0 ``where`` takes: a scalar tensor of the probabilities' dtype, on their device

    def __call__(self, scores: torch.Tensor, probs: torch.Tensor, *, hidden: torch.Tensor, rows: torch.Tensor,
                 out: torch.Tensor) -> torch.Tensor:
        zero = self.zero
        if hidden.shape == scores.shape and out.shape == probs.shape and rows.shape == (*scores.shape[:-1], 1):
            torch.eq(scores, -torch.inf, out=hidden)
            torch.all(hidden, -1, keepdim=True, out=rows)
            return torch.where(rows, zero, probs, out=out)
        _emptied_into(torch.eq, (scores, -torch.inf), hidden)
        _emptied_into(functools.partial(torch.all, dim=-1, keepdim=True), (hidden,), rows)
        return _emptied_into(torch.where, (rows, zero, probs), out)


def _emptied_into(op, args: tuple, out: torch.Tensor) -> torch.Tensor:
    out.resize_(0)
    op(*args, out=out)
    if not out.is_contiguous():  # torch gives an emptied out an input's strides; the plan's are contiguous
        values = out.contiguous()
        out.as_strided_(out.shape, values.stride())
        out.copy_(values)
    return out


def rms_norm_cast(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """weight * (x * rsqrt(mean(x^2, -1) + eps)) cast to the weight's dtype before the product, as models that
    normalise half-precision activations in float32 write it."""
    return torch.mul(weight, torch.rms_norm(x, (x.shape[-1],), None, eps).to(weight.dtype))


def rms_norm_cast_out(x, weight, eps, *, out: torch.Tensor) -> torch.Tensor:
    return torch.mul(weight, torch.rms_norm(x, (x.shape[-1],), None, eps).to(weight.dtype), out=out)


def rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of interleaved pairs (x [..., n, 2]): (x0 * cos - x1 * sin, x0 * sin + x1 * cos) [..., n, 2],
    each product and sum rounded on its own as the exported chain rounds them."""
    x0, x1 = x[..., 0], x[..., 1]
    return torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1)


class RotaryInto:
    """``rotary`` written into ``out``: computed whole in buffers of its own (one per chain: the calls of a method
    take turns), then copied, so ``out`` may share bytes with ``x`` (the exporter's memory plan may give it x's
    once x is read); the buffers grow to the largest call and are reused, no allocation per call once they are.

    A method passes the same bytes as ``x`` at every call (a new view of them each time): the halves of x and the
    buffer's views are made once for them and kept (holding x's storage, so no other tensor can take its
    address), which leaves six products and sums and the copy per call. In float32 on the CPU, where pterun's
    native kernels are built, one native call instead (``native/fused.c``: the same products and sums, each
    rounded as torch's kernels round it), for contiguous pairs and out x itself or bytes apart from it."""

    def __init__(self) -> None:
        self._buffer: torch.Tensor | None = None  # the pairs (2n values), then one product (n)
        self._views_key: tuple = ()
        self._views: tuple = ()
        self._key: tuple = ()
        self._native: tuple | None = None  # the native call's arguments for the key, or None: torch's steps

    def __call__(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
        if x.dtype is F32 and x.device.type == "cpu" and native.kernels is not None:
            if out.shape != x.shape:
                out.resize_(x.shape)
            key = (x.data_ptr(), x.shape, x.stride(), cos.data_ptr(), cos.shape, cos.stride(), cos.dtype,
                   cos.device, sin.data_ptr(), sin.shape, sin.stride(), sin.dtype, sin.device, out.data_ptr(),
                   out.stride(), out.dtype)
            if key != self._key:
                self._native, self._key = rotary_arguments(x, cos, sin, out), key
            if self._native is not None:
                native.kernels.rotary_pairs(*self._native)
                return out
        return self._torch_steps(x, cos, sin, out)

    def _torch_steps(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        key = (x.data_ptr(), x.shape, x.stride(), x.dtype, x.device, out.dtype)
        if key != self._views_key:
            self._views, self._views_key = self._views_for(x, out), key
        x0, x1, first, second, other, both = self._views
        torch.mul(x0, cos, out=first)
        torch.mul(x1, sin, out=other)
        first.sub_(other)
        torch.mul(x0, sin, out=second)
        torch.mul(x1, cos, out=other)
        second.add_(other)
        return _into(out, both)

    def _views_for(self, x: torch.Tensor, out: torch.Tensor) -> tuple:
        x0, x1 = x[..., 0], x[..., 1]
        n = x0.numel()
        buffer = self._buffer
        if buffer is None or buffer.numel() < 3 * n or buffer.dtype != out.dtype or buffer.device != out.device:
            buffer = self._buffer = torch.empty(3 * n, dtype=out.dtype, device=out.device)
        both = buffer[:2 * n].view(x.shape)
        return x0, x1, both[..., 0], both[..., 1], buffer[2 * n:3 * n].view(x0.shape), both


def rotary_arguments(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, out: torch.Tensor) -> tuple | None:
    """The native rotary call's arguments, or None where it does not take these tensors (the key they are kept
    under holds every address, size and stride they are made of)."""
    if not (2 <= x.dim() <= 5 and x.shape[-1] == 2 and x.is_contiguous() and out.dtype is F32 and out.is_contiguous()
            and all(t.dtype is F32 and t.device.type == "cpu" for t in (cos, sin))):
        return None
    if not ((out.data_ptr() == x.data_ptr() or apart(out, x)) and apart(out, cos) and apart(out, sin)):
        return None
    pairs = x.shape[:-1]
    try:
        cos_strides, sin_strides = cos.expand(pairs).stride(), sin.expand(pairs).stride()
    except RuntimeError:  # not broadcast to x's pairs: torch's steps say how
        return None
    pad = 4 - len(pairs)
    sizes, cos_strides, sin_strides = (1,) * pad + tuple(pairs), (0,) * pad + cos_strides, (0,) * pad + sin_strides
    return (x.data_ptr(), cos.data_ptr(), sin.data_ptr(), out.data_ptr(), *sizes, *cos_strides, *sin_strides)


def rotate_half(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding in the rotate-half form: x * cos + cat(-x2, x1) * sin, x = cat(x1, x2) along the last
    dimension; each product and the sum rounded on their own, as the exported chain rounds them."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class RotateHalfInto:
    """``rotate_half`` written into ``out``, computed in buffers of its own and summed into ``out`` last (``out``
    may share bytes with ``x``, as ``RotaryInto``'s may); on CUDA one Triton kernel where Triton is
    installed. No allocation per call once the buffers fit the largest call; the views of x and of the buffers
    are kept for the bytes x is passed in, as ``RotaryInto`` keeps its own."""

    def __init__(self) -> None:
        self._buffer: torch.Tensor | None = None  # x * cos, then the rotated x times sin
        self._key: tuple = ()
        self._views: tuple = ()

    def __call__(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
        if out.shape != x.shape:
            out.resize_(x.shape)
        # The kernel reads each element's partner while other programs write: only into bytes apart from its inputs.
        if (x.is_cuda and (kernel := _cuda_rotate_half()) is not None and all(apart(out, t) for t in (x, cos, sin))
                and kernel(x, cos, sin, out)):
            return out
        key = (x.data_ptr(), x.shape, x.stride(), x.dtype, x.device, out.dtype)
        if key != self._key:
            self._views, self._key = self._views_for(x, out), key
        by_cos, rotated, second, first, rotated_first, rotated_second = self._views
        torch.mul(x, cos, out=by_cos)
        torch.neg(second, out=rotated_first)
        rotated_second.copy_(first)
        rotated.mul_(sin)
        return torch.add(by_cos, rotated, out=out)

    def _views_for(self, x: torch.Tensor, out: torch.Tensor) -> tuple:
        n = x.numel()
        buffer = self._buffer
        if buffer is None or buffer.numel() < 2 * n or buffer.dtype != out.dtype or buffer.device != out.device:
            buffer = self._buffer = torch.empty(2 * n, dtype=out.dtype, device=out.device)
        by_cos, rotated = buffer[:n].view(x.shape), buffer[n:2 * n].view(x.shape)
        half = x.shape[-1] // 2
        return by_cos, rotated, x[..., half:], x[..., :half], rotated[..., :half], rotated[..., half:]


def apart(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors' bytes cannot overlap (the spans from their first to their last element)."""
    if a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        return True
    if a.numel() == 0 or b.numel() == 0:
        return True
    a0, b0 = a.data_ptr(), b.data_ptr()
    a1 = a0 + (sum((n - 1) * abs(s) for n, s in zip(a.shape, a.stride())) + 1) * a.element_size()
    b1 = b0 + (sum((n - 1) * abs(s) for n, s in zip(b.shape, b.stride())) + 1) * b.element_size()
    return a1 <= b0 or b1 <= a0


@functools.cache
def _cuda_rotate_half():
    try:
        from pterun.kernels.triton.rotary import rotate_half_out
    except ImportError:  # no Triton: PyTorch's kernels, the same arithmetic
        return None
    return rotate_half_out

