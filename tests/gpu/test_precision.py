"""On CUDA, float32 programs compute in float32 under PyTorch's defaults (cuDNN's TF32 on) and under any
switches the caller sets; ``allow_tf32=True`` opts in to TF32, within the error docs/precision.md states."""

from __future__ import annotations

import pytest
import torch

import pterun
from tests.gpu.conftest import FIXTURES, load_fixture, on
from tests.support.compare import assert_matches

pytestmark = pytest.mark.gpu

# Convolution and matrix-product programs: TF32 moved them by 1e-4 to 1e-2.
CONV_NETS = ("mobilenet_v2", "convnext", "et_mobilenet_v1_025", "et_ds_cnn", "resnet")
EXACT = 2e-5  # float32 on cuDNN/cuBLAS against ExecuTorch's portable kernels: a few units of 1e-6
TF32_BOUND = 5e-2  # docs/precision.md: TF32 rounds products' inputs to 10 bits


def _switches() -> tuple:
    get = torch._C._get_fp32_precision_getter
    return get("cuda", "matmul"), get("cuda", "conv"), get("cuda", "rnn"), get("mkldnn", "matmul")


def _run(name: str, **options) -> tuple[list, list]:
    pte, ptd, calls, expected = load_fixture(FIXTURES / "corpus" / name)
    method = pterun.Runtime.get().load_program(pte, data_path=ptd or None, device="cuda", **options)
    method = method.load_method("forward")
    outputs = []
    for _ in range(3):  # eager, capture, replay
        outputs = [on("cpu", method.execute(on("cuda", call))) for call in calls]
    return outputs, expected


@pytest.mark.parametrize("name", CONV_NETS)
def test_float32_is_exact_under_pytorchs_defaults(name):
    assert torch.backends.cudnn.allow_tf32, "premise: PyTorch's default lets cuDNN use TF32"
    before = _switches()
    outputs, expected = _run(name)
    for got, want in zip(outputs, expected):
        assert_matches(got, want, rtol=EXACT, what=name)
    assert _switches() == before and torch.backends.cudnn.allow_tf32


@pytest.fixture
def high_precision():
    saved = torch.get_float32_matmul_precision()  # user-set: the caller's setting, put back after
    torch.set_float32_matmul_precision("high")  # user-set: TF32 for cuBLAS, what the test is about
    yield
    torch.set_float32_matmul_precision(saved)  # user-set


def test_float32_is_exact_when_the_caller_allows_tf32(high_precision):
    before = _switches()
    assert before[0] == "tf32", "premise: the caller allowed TF32 matrix products"
    for name in ("bert", "mobilenet_v2"):
        outputs, expected = _run(name, compile=name == "bert")
        for got, want in zip(outputs, expected):
            assert_matches(got, want, rtol=EXACT * 5 if name == "bert" else EXACT, what=name)
    assert _switches() == before


def test_allow_tf32_opts_in_within_the_stated_error():
    exact, expected = _run("mobilenet_v2")
    fast, _ = _run("mobilenet_v2", allow_tf32=True)
    differs = False
    for e, f, want in zip(exact, fast, expected):
        assert_matches(f[0], want[0], rtol=TF32_BOUND, what="allow_tf32")
        differs |= not torch.equal(e[0], f[0])
    assert differs, "allow_tf32=True should compute the convolutions in TF32"


def test_a_decode_steps_float32_attention_computes_in_float32_with_a_safe_softmax():
    """One query per head in float32 (a decode step) runs as two float32 products and a softmax on CUDA, not
    PyTorch's fused kernel (kernels/fused.py): within float32 rounding of a float64 reference, a row the mask
    hides entirely is zeros, and compiled the same."""
    from pterun.kernels import fused

    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(shape, generator=g) for shape in ((2, 12, 1, 64), (2, 12, 512, 64), (2, 12, 512, 64)))
    mask = torch.zeros(2, 1, 1, 512)
    mask[0, ..., 300:] = -torch.inf
    mask[1] = -torch.inf  # the second batch sees no key at all
    scale_q = scale_k = 64 ** -0.25
    scores = (q.double() * scale_q) @ (k.double() * scale_k).transpose(-1, -2) + mask.double()
    expected = (torch.softmax(scores, -1).nan_to_num(0.0) @ v.double()).flatten(0, -3)
    assert expected[12:].abs().max() == 0 and expected[:12].abs().max() > 0, "premise: a hidden row and others"
    cuda = [t.cuda() for t in (q, k, v, mask)]
    for way in (fused.attention, torch.compile(fused.attention, fullgraph=True)):
        got = way(cuda[0], cuda[1], cuda[2], scale_q, scale_k, cuda[3]).cpu()
        assert got.dtype == torch.float32 and torch.equal(got[12:], torch.zeros_like(got[12:]))
        err = ((got.double() - expected).norm() / expected.norm()).item()
        assert err < 1e-6, f"{way}: relative error {err:.2e}"
