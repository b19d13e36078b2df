"""Operators on the values where kernels tend to disagree, against ExecuTorch's runtime.

Ties (which index do argmax and topk report), NaN and infinities, integer
division and rounding modes, casts that truncate or wrap, empty and 0-dim
tensors, half and bfloat16, and the resampling, padding and pooling variants
models use. Each case is a small program; the models elsewhere cover the
common paths.

Where ExecuTorch's portable kernels do not compute what PyTorch defines, pterun
follows PyTorch; those cases are checked against eager PyTorch instead, and
assert that ExecuTorch still differs (so the test notices when it is fixed).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.support.compare import assert_matches
from tests.support.differential import LOWERINGS, check, load
from tests.support.exporting import ExportSpec, export_program
from tests.support.oracle import run_reference

NAN, INF = float("nan"), float("inf")
TIES = torch.tensor([[1.0, 3.0, 3.0, 2.0, 3.0, NAN, -0.0, 0.0], [5.0, 5.0, 5.0, 5.0, 1.0, 1.0, 1.0, 1.0]])
INTS = torch.tensor([[-7, 7, -8, 9, 0, 5, -1, 3], [3, -3, 2, -2, 1, -1, 4, -4]])
DIVISORS = torch.tensor([3, -3, 2, -2, 3, -3, 2, -2])


def _g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


CASES = {
    "ties": (
        lambda x: (
            x.argmax(-1),
            x.argmin(-1),
            *torch.topk(x, 3),
            *torch.topk(x, 2, largest=False),
            *torch.max(x, -1),
            *torch.min(x, 0),
        ),
        (TIES,),
    ),
    "nan": (
        lambda x: (
            x.max(),
            x.min(),
            x.amax(-1),
            torch.clamp(x, -1, 1),
            torch.maximum(x, x.flip(-1)),
            x.sum(),
            torch.nan_to_num(x),
            x.isnan(),
            x == x,
        ),
        (TIES,),
    ),
    "infinities": (
        lambda x: (
            torch.softmax(x, -1),
            torch.log_softmax(x, -1),
            torch.logsumexp(x, -1),
            x.masked_fill(x < 0, -INF),
            torch.exp(x),
        ),
        (torch.tensor([[1e4, -1e4, 0.0, 3.0], [-INF, 0.0, 1.0, 2.0]]),),
    ),
    "integer_division": (
        lambda a, b: (
            torch.div(a, b, rounding_mode="trunc"),
            torch.div(a, b, rounding_mode="floor"),
            a // b,
            torch.fmod(a, b),
            a / b,
        ),
        (INTS, DIVISORS),
    ),
    "float_remainder": (
        lambda a, b: (torch.remainder(a, b), a % 3.0, torch.fmod(a, -2.0)),
        (INTS.float() + 0.5, DIVISORS.float()),
    ),
    "rounding": (
        lambda x: (torch.round(x), torch.floor(x), torch.ceil(x), torch.trunc(x), torch.frac(x)),
        (torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, 0.25, -2.7, 2.45]),),
    ),
    "casts": (
        lambda x: (
            x.to(torch.int32),
            x.to(torch.uint8),
            x.to(torch.int8),
            x.to(torch.bool),
            x.half(),
            x.to(torch.bfloat16),
            x.double(),
        ),
        (torch.tensor([1.7, -1.7, 100.5, -3.2, 127.9, 0.0, 255.0, 2.5]),),
    ),
    "integer_arithmetic": (
        lambda a, b: (
            a & b,
            a | b,
            a ^ b,
            ~a,
            a**2,
            a.abs(),
            a.clamp(-3, 4),
            a.cumsum(-1),
            a * b,
            a - b,
            torch.where(a > b, a, b),
        ),
        (INTS, DIVISORS),
    ),
    "uint8_wraps": (
        lambda a, b: (a + b, a * b, a - b, a // 3),
        (
            torch.tensor([250, 3, 128, 0], dtype=torch.uint8),
            torch.tensor([10, 255, 128, 1], dtype=torch.uint8),
        ),
    ),
    "bools": (
        lambda a, b: (
            a & b,
            a | b,
            ~a,
            a.sum(),
            a.float().mean(),
            torch.where(a, 1.0, 0.0),
            a.all(),
            a.any(),
            a.logical_xor(b),
        ),
        (torch.tensor([True, False, True, False]), torch.tensor([True, True, False, False])),
    ),
    "empty": (
        lambda x: (x[:, :0], x[:, :0].sum(-1), torch.cat([x[:, :0], x], 1), x[:0]),
        (torch.randn(2, 3, generator=_g(1)),),
    ),
    "zero_dim": (
        lambda x, s: (x * s, s + 1, s.reshape(1), x.sum(), s > 0),
        (torch.randn(3, generator=_g(2)), torch.tensor(2.5)),
    ),
    "factories": (
        lambda x: (
            torch.arange(x.shape[0]) * 2,
            torch.full((2, 3), 7, dtype=torch.int32),
            torch.ones_like(x),
            torch.zeros(2, dtype=torch.bool),
            torch.linspace(0, 1, 5),
            torch.eye(3),
        ),
        (torch.randn(4, generator=_g(3)),),
    ),
    "indexing": (
        lambda x, i: (x[:, i], x[i], x[..., i], x[i, :, i], x[x > 0], torch.gather(x[0], 1, i.view(1, 3))),
        (torch.randn(3, 4, 5, generator=_g(4)), torch.tensor([0, 2, 2])),
    ),
    "scatter": (
        lambda x, i: (
            torch.zeros(2, 8).scatter_add(1, i, x),
            torch.zeros(2, 8).scatter(1, i, x),
            torch.zeros(8).index_put((i[0],), x[0], accumulate=True),
            torch.zeros(2, 8).index_add(1, i[1], x),
        ),
        (torch.randn(2, 4, generator=_g(5)), torch.tensor([[0, 0, 7, 3], [1, 1, 1, 2]])),
    ),
    "reductions": (
        lambda x: (
            x.var(-1),
            x.std(-1, unbiased=False),
            x.var(0, correction=0),
            x.prod(-1),
            x.norm(p=1),
            torch.linalg.vector_norm(x, 2, -1),
            F.normalize(x, dim=-1),
            x.mean((0, 1), keepdim=True),
        ),
        (torch.randn(3, 7, generator=_g(6)),),
    ),
    "resampling": (
        lambda x: (
            F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False),
            F.interpolate(x, size=(5, 7), mode="nearest"),
            F.interpolate(x, size=(5, 7), mode="bilinear", align_corners=True),
            F.pad(x, (1, 2, 0, 1)),
            F.pad(x, (1, 1, 1, 1), mode="reflect"),
            F.pad(x, (2, 1, 1, 0), mode="replicate"),
        ),
        (torch.randn(1, 2, 3, 4, generator=_g(7)),),
    ),
    "pooling": (
        lambda x: (
            F.max_pool2d(x, 2, ceil_mode=True),
            F.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
            F.adaptive_avg_pool2d(x, (2, 3)),
            F.max_pool2d(x, 3, 1, 1),
        ),
        (torch.randn(1, 2, 5, 7, generator=_g(8)),),
    ),
    "normalization": (
        lambda x: (
            F.group_norm(x, 2, torch.linspace(0.5, 1.5, 4), torch.linspace(-1, 1, 4)),
            F.layer_norm(x, (5,)),
            F.instance_norm(x),
        ),
        (torch.randn(2, 4, 3, 5, generator=_g(9)),),
    ),
    "activations": (
        lambda a: (
            torch.atan2(a, a.flip(0)),
            torch.erf(a),
            torch.expm1(a),
            torch.log1p(a.abs()),
            torch.rsqrt(a.abs() + 1),
            torch.sigmoid(a),
            F.silu(a),
            F.gelu(a, approximate="tanh"),
            F.elu(a),
            F.leaky_relu(a, 0.1),
            F.hardswish(a),
            F.softplus(a),
            F.hardtanh(a),
            F.relu6(a),
            F.mish(a),
        ),
        (torch.randn(16, generator=_g(10)) * 4,),
    ),
    "matmuls": (
        lambda a, b: (
            torch.bmm(a, b),
            torch.baddbmm(torch.ones(2, 3, 5), a, b, alpha=0.5, beta=2.0),
            torch.einsum("bij,bjk->bik", a, b),
            a.transpose(1, 2) @ a,
        ),
        (torch.randn(2, 3, 4, generator=_g(11)), torch.randn(2, 4, 5, generator=_g(12))),
    ),
    "convolutions": (
        lambda x: (
            F.conv_transpose2d(x, torch.ones(2, 3, 3, 3), stride=2, padding=1, output_padding=1),
            F.conv2d(x, torch.ones(4, 1, 3, 3), groups=2, dilation=2, padding=2),
            F.conv1d(x.flatten(2), torch.ones(3, 2, 5), stride=3),
        ),
        (torch.randn(1, 2, 4, 4, generator=_g(13)),),
    ),
    "shapes": (
        lambda x: (
            x.repeat(2, 1),
            x.repeat_interleave(2, dim=0),
            x.expand(3, 2, 3),
            x.flip(0),
            x.roll(1, 1),
            torch.tril(x),
            torch.triu(x, 1),
            x.t().contiguous(),
            torch.stack([x, x], 1),
            x.unsqueeze(0).permute(2, 0, 1),
            x.narrow(1, 1, 2),
        ),
        (torch.randn(2, 3, generator=_g(14)),),
    ),
    "embedding": (
        lambda i, w: (F.embedding(i, w, padding_idx=0), F.one_hot(i, 5)),
        (torch.tensor([[0, 1, 2], [3, 0, 4]]), torch.randn(5, 3, generator=_g(15))),
    ),
    "half": (
        lambda a: (a * 3, a.float(), torch.softmax(a.float(), -1).half(), a.sum(), a.amax(-1)),
        (torch.randn(2, 5, generator=_g(16)).half(),),
    ),
    "bfloat16": (
        lambda a: (a * 3 + 1, a.float(), torch.relu(a), a @ a.t(), a.mean(-1)),
        (torch.randn(3, 4, generator=_g(17)).bfloat16(),),
    ),
}


class Case(torch.nn.Module):
    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def _export(name: str, lower: str, fn, args):
    return export_program(f"op-{name}-{lower}", lambda: ExportSpec(Case(fn), args, lower=lower))


@pytest.mark.parametrize("lower", LOWERINGS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_operator_edge_values(name, lower):
    fn, args = CASES[name]
    check(_export(name, lower, fn, args), args)


# -- where ExecuTorch differs from PyTorch ----------------------------------------------------------------

QUIRKS = {
    # ExecuTorch 1.5.1's portable remainder on integer tensors truncates toward zero as C's % does
    # (remainder(-7, 3) is -1 there); PyTorch's remainder takes the divisor's sign (2). Floats agree.
    "integer_remainder": (lambda a, b: (torch.remainder(a, b), a % 3, a % -3), (INTS, DIVISORS)),
    # ExecuTorch 1.5.1's sign of NaN is NaN; PyTorch's is 0.
    "sign_of_nan": (lambda x: (torch.sign(x), torch.sgn(x)), (torch.tensor([NAN, -2.0, 0.0, 3.0]),)),
}


@pytest.mark.parametrize("lower", LOWERINGS)
@pytest.mark.parametrize("name", sorted(QUIRKS))
def test_follows_pytorch_where_executorch_differs(name, lower):
    fn, args = QUIRKS[name]
    exported = _export(name, lower, fn, args)
    eager = list(fn(*args))
    assert_matches(load(exported).load_method("forward").execute(list(args)), eager)
    reference = run_reference(exported.pte, list(args))
    with pytest.raises(AssertionError):
        assert_matches(
            reference, eager
        )  # still an ExecuTorch quirk; once this fails, compare with it directly
