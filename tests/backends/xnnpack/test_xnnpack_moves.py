"""Elements moved without arithmetic (transposes, slices, concatenations, pads, copies into an output) and float
add, subtract, multiply and divide with broadcasting, in pterun's native kernels (``native/move.c``); and a small
XNNPACK program whose translation is native calls alone, made again as one recorded native call per call, its
precision pinned only around the steps (executor/codegen/replay.py).

* The kernels against PyTorch's own moves and arithmetic: permutations, slices and pieces of every element size,
  broadcasts of either operand, clamps, infinities and NaN, split over two threads where the work is large.
* Programs lowered with XnnpackPartitioner against ExecuTorch's runtime, bit for bit, on every call: the first ones
  run the steps, later ones replay.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import pterun
from pterun import native
from pterun.backends.xnnpack.nodes import native as xnn_native
from pterun.executor.call.precision import Unpinned
from pterun.native import geometry
from tests.backends.xnnpack.programs import export_quantized, node_kinds, partitioners, quantized_inputs
from tests.support.compare import same_bits
from tests.support.exporting import ExportSpec, export_program
from tests.support.oracle import run_reference

kernels = native.kernels
pytestmark = pytest.mark.skipif(kernels is None, reason="needs pterun's native kernels (CI builds them)")


def _geometry(*rows) -> torch.Tensor:
    return torch.tensor([v for row in rows for v in row], dtype=torch.int64)


def _strides(shape) -> list[int]:
    return geometry.contiguous_strides(shape)


@pytest.mark.parametrize("dtype", [torch.int8, torch.float16, torch.float32, torch.int64])
@pytest.mark.parametrize("threads", [1, 2])
def test_copy_strided_moves_what_torch_moves(dtype, threads):
    torch.manual_seed(0)
    cases = (((2, 3, 5, 7), (0, 2, 3, 1)), ((4, 1, 6), (2, 0, 1)), ((64, 48, 50), (1, 2, 0)), ((300, 500), (1, 0)),
             ((3, 70), (1, 0)), ((9,), (0,)))
    for shape, perm in cases:
        x = (torch.randn(shape) * 50).to(dtype)
        out_shape = tuple(shape[i] for i in perm)
        y = torch.empty(out_shape, dtype=dtype)
        walk = _geometry([0, 0], out_shape, [_strides(shape)[i] for i in perm], _strides(out_shape))
        kernels.copy_strided(x.data_ptr(), y.data_ptr(), x.element_size(), len(shape), walk.data_ptr(), threads)
        assert torch.equal(y, x.permute(perm)), (shape, perm)
    # A slice of the middle, written at an offset into a larger output (a concatenation's second piece).
    x = torch.arange(6 * 8 * 10).to(dtype).view(6, 8, 10)
    y = torch.zeros(6, 8, 14, dtype=dtype)
    xs, ys = _strides((6, 8, 10)), _strides((6, 8, 14))
    walk = _geometry([1 * xs[0] + 2 * xs[1] + 3 * xs[2], 10 * ys[2]], [4, 5, 4], xs, ys)
    kernels.copy_strided(x.data_ptr(), y.data_ptr(), x.element_size(), 3, walk.data_ptr(), threads)
    expected = torch.zeros(6, 8, 14, dtype=dtype)
    expected[:4, :5, 10:14] = x[1:5, 2:7, 3:7]
    assert torch.equal(y, expected)


def test_copy_strided_refuses_what_it_cannot_move():
    x = torch.zeros(4)
    walk = _geometry([0, 0], [4], [1], [1])
    with pytest.raises(ValueError, match="elements of 3 bytes"):
        kernels.copy_strided(x.data_ptr(), x.data_ptr(), 3, 1, walk.data_ptr(), 1)
    with pytest.raises(ValueError, match="7 dimensions"):
        kernels.copy_strided(x.data_ptr(), x.data_ptr(), 4, 7, walk.data_ptr(), 1)


_TORCH = {"XNNAdd": torch.add, "XNNSubtract": torch.sub, "XNNMultiply": torch.mul, "XNNDiv": torch.div}
EDGES = [0.0, -0.0, 1.0, -1.5, math.inf, -math.inf, math.nan, 3.0e38, -3.0e38, 1e-45, 1e-40]



@pytest.mark.parametrize("kind", list(xnn_native.BINARY_OPS))
@pytest.mark.parametrize("threads", [1, 2])
def test_vbinary_is_torchs_arithmetic_then_the_clamp(kind, threads):
    torch.manual_seed(1)
    op = geometry.BINARY_OPS[xnn_native.BINARY_OPS[kind]]
    edges = torch.tensor(EDGES)
    for a_shape, b_shape in (((5, 11), (5, 11)), ((3, 1, 7), (4, 1)), ((1,), (6, 9)), ((2, 3, 4, 5), (5,)),
                             ((512, 300), (512, 1)), ((1, 1), (1,))):
        shape = torch.broadcast_shapes(a_shape, b_shape)
        a = torch.randn(a_shape) * 4
        b = torch.randn(b_shape) * 4
        a.view(-1)[: min(a.numel(), len(EDGES))] = edges[: a.numel()]
        b.view(-1)[-min(b.numel(), len(EDGES)):] = edges.flip(0)[: b.numel()]
        for lo, hi in ((-math.inf, math.inf), (-1.0, 1.0), (0.0, math.inf)):
            y = torch.empty(shape)
            walk = torch.tensor(geometry.binary_geometry(shape, a_shape, b_shape))
            kernels.vbinary(op, a.data_ptr(), b.data_ptr(), y.data_ptr(), len(walk) // 4, walk.data_ptr(), lo, hi,
                            threads)
            expected = _TORCH[kind](a, b)
            if math.isfinite(lo) or math.isfinite(hi):
                expected = expected.clamp(lo, hi)
            assert same_bits(y, expected), (kind, a_shape, b_shape, lo, hi)


# -- programs ---------------------------------------------------------------------------------------------------


class Moves(torch.nn.Module):
    """Every move the XNNPACK delegate makes natively, and the four clamped float operations broadcast."""

    def forward(self, x, y):
        a = x.permute(0, 2, 3, 1)[:, 1:7]
        b = torch.cat([a, a * 2.0], dim=3)
        c = F.pad(b, (1, 1, 2, 0), value=0.5)
        d = torch.clamp((x + y) / (y * y + 1.0), -1.0, 1.0)
        return c, d - y, x.reshape(2, -1)


def _moves_inputs(seed: int) -> list:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, 3, 8, 5, generator=g), torch.randn(5, generator=g)]


def _assert_replays_with_their_bits(exported, inputs, calls: int = 5) -> pterun.Method:
    method = pterun.Runtime.get().load_program(exported.pte).load_method("forward")
    for seed in range(calls):
        args = inputs(seed)
        actual = method.execute(args)
        expected = run_reference(exported.pte, args)
        assert len(actual) == len(expected)
        for k, (a, e) in enumerate(zip(actual, expected)):
            assert torch.equal(a, e) or same_bits(a, e), f"call {seed}, output {k}"
    return method


def test_a_program_of_moves_and_broadcast_arithmetic_replays_with_executorchs_bits():
    exported = export_program("xnnpack-moves-v1", lambda: ExportSpec(Moves(), tuple(_moves_inputs(0)),
                                                                    lower=partitioners))
    kinds = node_kinds(exported.pte)
    assert {"XNNStaticTranspose", "XNNStaticSlice", "XNNConcatenate2", "XNNStaticConstantPad", "XNNAdd",
            "XNNSubtract", "XNNMultiply", "XNNDiv"} <= set(kinds), kinds
    method = _assert_replays_with_their_bits(exported, _moves_inputs)
    routes = [how for handle in method.delegate_handles for _, how in handle.routes]
    assert "native float binary" in routes, routes
    assert "torch." not in method.delegate_handles[0]._last.source, "premise: native calls alone"
    # The first call runs the steps, the second records them, the rest replay; the call itself pins nothing (the
    # replay pins around the steps).
    assert list(method.replays.values()) == [3], method.replays
    assert isinstance(method._precision, Unpinned)


def test_an_int8_convnet_replays_whole_with_executorchs_bits():
    exported = export_quantized("convnet", "per-channel")
    assert {"XNNStaticTranspose", "XNNConcatenate2", "XNNMaxPooling2d", "XNNGlobalAvgPooling2d"} <= set(
        node_kinds(exported.pte)), "premise: the moves and pools the translation makes natively"
    method = _assert_replays_with_their_bits(exported, lambda seed: list(quantized_inputs("convnet", seed)))
    assert list(method.replays.values()) == [3], method.replays


def test_a_whole_replay_pins_the_precision_around_its_steps_alone():
    """A caller's bfloat16 oneDNN switch and autocast reach no step: where the steps run (the first calls), the
    replay pins float32 around them and puts the caller's settings back after; a replayed call changes none."""
    exported = export_program("xnnpack-moves-v1", lambda: ExportSpec(Moves(), tuple(_moves_inputs(0)),
                                                                    lower=partitioners))
    method = pterun.Runtime.get().load_program(exported.pte).load_method("forward")
    replay = next(iter(method._loaded.generated.replays.values()))
    assert method._loaded.generated.whole is replay and replay.around is not None, "premise: one replay, all of it"
    seen = []
    pin = replay.around

    class Watched:
        def enter(self) -> bool:
            seen.append(torch._C._get_fp32_precision_getter("mkldnn", "matmul"))
            pinned = pin.enter()
            seen.append(torch._C._get_fp32_precision_getter("mkldnn", "matmul"))
            return pinned

        def exit(self, pinned: bool) -> None:
            pin.exit(pinned)

    replay.around = Watched()
    saved = torch.get_float32_matmul_precision()  # user-set: put back after
    torch.set_float32_matmul_precision("medium")  # user-set: what the test is about
    try:
        for seed in range(4):
            args = _moves_inputs(seed)
            for a, e in zip(method.execute(args), run_reference(exported.pte, args)):
                assert torch.equal(a, e) or same_bits(a, e), seed
            assert torch._C._get_fp32_precision_getter("mkldnn", "matmul") == "bf16", "the caller's, back after"
    finally:
        torch.set_float32_matmul_precision(saved)  # user-set
    assert seen == ["bf16", "ieee", "bf16", "ieee"], "pinned around the two calls that ran the steps, only"
    assert method.replays[next(iter(method.replays))] == 2
