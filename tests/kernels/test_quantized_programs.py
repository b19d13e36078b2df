"""quantized_decomposed::* kernels in exported programs, run on pterun and on ExecuTorch's runtime.

Each program calls the operators under test (its premise: the exporter kept
them), so the calling convention (arguments, out variants, dtypes) is checked
as the runtime sees it; test_quantized_kernels.py covers the arithmetic.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import executorch.exir.passes._quant_patterns_and_replacements  # noqa: F401 - functional add, mixed_*
import executorch.kernels.quantized  # noqa: F401 - registers the kernels and their out variants
import torch

import pterun
from tests.support.compare import assert_matches
from tests.support.exporting import Exported, ExportSpec, _export, locked, publish, scratch
from tests.support.oracle import run_reference
from tests.support.premises import assert_calls, export_calling

qd = torch.ops.quantized_decomposed


def _run_both(exported, inputs):
    method = pterun.Runtime.get().load_program(exported.pte).load_method("forward")
    return method.execute(list(inputs)), run_reference(exported.pte, list(inputs))


class _PerTensor(torch.nn.Module):
    def forward(self, x, q16):
        q8 = qd.quantize_per_tensor.default(x, 0.05, -3, -128, 127, torch.int8)
        u8 = qd.quantize_per_tensor.default(x, 0.11, 128, 0, 255, torch.uint8)
        back = qd.dequantize_per_tensor.default(q8, 0.05, -3, -128, 127, torch.int8)
        back16 = qd.dequantize_per_tensor.default(
            q16, 0.001, 7, -32768, 32767, torch.int16, out_dtype=torch.float16
        )
        scale, zero_point = qd.choose_qparams.tensor(x, -128, 127, 1e-5, torch.int8)
        dq = qd.quantize_per_tensor.tensor(x, scale, zero_point, -128, 127, torch.int8)
        ddq = qd.dequantize_per_tensor.tensor(dq, scale, zero_point, -128, 127, torch.int8)
        return q8, u8, back, back16, scale, zero_point, dq, ddq


def test_per_tensor_program_matches_executorch():
    exported = export_calling(
        "quant-per-tensor-v1",
        lambda: ExportSpec(_PerTensor(), (torch.randn(4, 33), torch.zeros(4, 33, dtype=torch.int16))),
        {"quantized_decomposed::quantize_per_tensor.out", "quantized_decomposed::dequantize_per_tensor.out",
         "quantized_decomposed::choose_qparams.Tensor_out",
         "quantized_decomposed::quantize_per_tensor.Tensor_out",
         "quantized_decomposed::dequantize_per_tensor.Tensor_out"},
    )
    g = torch.Generator().manual_seed(31)
    for scale in (1.0, 1e-3, 50.0):
        x = torch.randn(4, 33, generator=g) * scale
        x[0, :4] = torch.tensor([0.025, -0.075, math.inf, 1e30])
        q16 = torch.randint(-32768, 32767, (4, 33), generator=g, dtype=torch.int16)
        actual, expected = _run_both(exported, (x, q16))
        assert_matches(actual, expected)


class _PerChannelAndToken(torch.nn.Module):
    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(37)
        self.register_buffer("weight", torch.randint(-127, 128, (6, 8), generator=g, dtype=torch.int8))
        self.register_buffer("scales", torch.rand(6, generator=g) * 0.02 + 1e-3)
        self.register_buffer("zero_points", torch.randint(-3, 3, (6,), generator=g))
        self.register_buffer("channel_scales", (torch.rand(8, generator=g, dtype=torch.float64) + 0.1) * 0.03)

    def forward(self, x):
        w = qd.dequantize_per_channel.default(
            self.weight, self.scales, self.zero_points, 0, -128, 127, torch.int8
        )
        w_sym = qd.dequantize_per_channel.default(self.weight, self.scales, None, 0, -128, 127, torch.int8)
        qc = qd.quantize_per_channel.default(x, self.channel_scales, torch.zeros(8, dtype=torch.int64), 1,
                                             -128, 127, torch.int8)
        scale, zero_point = qd.choose_qparams_per_token_asymmetric.default(x, torch.int8)
        qt = qd.quantize_per_token.default(x, scale, zero_point, -128, 127, torch.int8)
        dt = qd.dequantize_per_token.default(qt, scale, zero_point, -128, 127, torch.int8, torch.float32)
        return x @ w.T, x @ w_sym.T, qc, scale, zero_point, qt, dt


def test_per_channel_and_per_token_program_matches_executorch():
    batch = torch.export.Dim("batch", min=1, max=16)
    exported = export_calling(
        "quant-per-channel-token-v1",
        lambda: ExportSpec(_PerChannelAndToken(), (torch.randn(5, 8),), dynamic_shapes=({0: batch},)),
        {"quantized_decomposed::dequantize_per_channel.out", "quantized_decomposed::quantize_per_channel.out",
         "quantized_decomposed::choose_qparams_per_token_asymmetric.out",
         "quantized_decomposed::quantize_per_token.out", "quantized_decomposed::dequantize_per_token.out"},
    )
    g = torch.Generator().manual_seed(41)
    for rows in (5, 1, 16, 3):  # the per-token results change shape with the input
        x = torch.randn(rows, 8, generator=g) * torch.logspace(-2, 2, rows)[:, None]
        actual, expected = _run_both(exported, (x,))
        assert_matches(actual, expected)


class _Embeddings(torch.nn.Module):
    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(43)
        self.register_buffer("byte", torch.randint(-128, 128, (10, 16), generator=g, dtype=torch.int8))
        self.register_buffer("nibbles", torch.randint(0, 256, (10, 8), generator=g, dtype=torch.uint8))
        self.register_buffer("crumbs", torch.randint(0, 256, (10, 4), generator=g, dtype=torch.uint8))
        self.register_buffer("row_scales", torch.rand(10, generator=g) * 0.1)
        self.register_buffer("group_scales", torch.rand(10, 4, generator=g) * 0.1)
        self.register_buffer("group_zeros", torch.randint(-3, 3, (10, 4), generator=g).float())
        self.register_buffer("half_scales", (torch.rand(10, 2, generator=g) * 0.1).half())

    def forward(self, idx):
        return (
            qd.embedding_byte.default(self.byte, self.row_scales, None, -128, 127, idx),
            qd.embedding_byte.default(self.byte, self.group_scales, self.group_zeros, -128, 127, idx),
            qd.embedding_byte.dtype(self.byte, self.half_scales, None, -128, 127, idx, dtype=torch.float16),
            qd.embedding_4bit.default(self.nibbles, self.group_scales, None, -8, 7, idx),
            qd.embedding_4bit.dtype(self.nibbles, self.half_scales, None, -8, 7, idx, dtype=torch.float32),
            qd.embedding_2bit.default(self.crumbs, self.row_scales, None, -2, 1, idx),
            qd.embedding_2bit.dtype(self.crumbs, self.half_scales, None, -2, 1, idx, dtype=torch.float16),
        )


def test_embedding_program_matches_executorch():
    exported = export_calling(
        "quant-embeddings-v1",
        lambda: ExportSpec(_Embeddings(), (torch.tensor([[0, 3, 9], [2, 2, 5]]),)),
        {f"quantized_decomposed::embedding_{kind}.{overload}"
         for kind in ("byte", "4bit", "2bit") for overload in ("out", "dtype_out")},
    )
    for idx in (torch.tensor([[0, 3, 9], [2, 2, 5]]), torch.tensor([[9, 8, 7], [1, 0, 4]])):
        actual, expected = _run_both(exported, (idx,))
        assert_matches(actual, expected, ulps=0)


def _register_missing_fakes():
    # ExecuTorch defines these functional forms without shape functions; export needs them.
    fakes = {
        "mixed_mm": lambda input, weight, weight_scales, weight_zero_points:
            input.new_empty((input.shape[0], weight.shape[1])),
        "mixed_linear": lambda input, weight, weight_scales, weight_zero_points, dtype=None:
            input.new_empty((input.shape[0], weight.shape[0]), dtype=dtype or input.dtype),
        "add": lambda a, *args: torch.empty_like(a),
    }
    for name, fake in fakes.items():
        try:
            torch.library.register_fake(f"quantized_decomposed::{name}", fake)
        except RuntimeError:
            pass  # registered already


class _MixedAndAdd(torch.nn.Module):
    def __init__(self):
        super().__init__()
        g = torch.Generator().manual_seed(47)
        self.register_buffer("w", torch.randint(-128, 128, (8, 5), generator=g, dtype=torch.int8))
        self.register_buffer("s", torch.rand(8, generator=g) * 0.1)
        self.register_buffer("wl", torch.randint(-128, 128, (6, 8), generator=g, dtype=torch.int8))
        self.register_buffer("sl", torch.rand(6, 2, generator=g) * 0.1)

    def forward(self, x, a, b):
        return (
            qd.mixed_mm.default(x, self.w, self.s, None),
            qd.mixed_linear.default(x, self.wl, self.sl, None),
            qd.add.default(a, 0.1, 3, 0, 255, b, 0.2, 100, 0, 255, 0.3, 7, 0, 255),
        )


def _export_mixed_and_add(directory: str) -> None:
    _register_missing_fakes()
    inputs = (torch.randn(3, 8), torch.randint(0, 256, (4, 4), dtype=torch.uint8),
              torch.randint(0, 256, (4, 4), dtype=torch.uint8))
    _export(ExportSpec(_MixedAndAdd(), inputs), Path(directory))


def _mixed_and_add() -> Exported:
    """Exported in a process of its own: once ExecuTorch's QuantFusionPass has run in a process (tests/peer
    runs it), quantized_decomposed::add has a composite kernel there, and export decomposes the op."""
    key = "quant-mixed-add-v1"
    with locked(key) as directory:
        if not (directory / "program.pte").exists():
            partial = scratch(directory)
            code = f"from tests.kernels.test_quantized_programs import _export_mixed_and_add as e; e({str(partial)!r})"
            done = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parents[2],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            assert done.returncode == 0, done.stderr[-4000:]
            publish(partial, directory)
    exported = Exported(key, directory / "program.pte", [], torch.load(directory / "inputs.pt"))
    assert_calls(exported.pte, {"quantized_decomposed::mixed_mm.out", "quantized_decomposed::mixed_linear.out",
                                "quantized_decomposed::add.out"}, what=f"{key}: ")
    return exported


def test_mixed_and_add_program_matches_executorch():
    exported = _mixed_and_add()
    g = torch.Generator().manual_seed(53)
    for _ in range(3):
        inputs = (torch.randn(3, 8, generator=g),
                  torch.randint(0, 256, (4, 4), generator=g, dtype=torch.uint8),
                  torch.randint(0, 256, (4, 4), generator=g, dtype=torch.uint8))
        actual, expected = _run_both(exported, inputs)
        assert_matches(actual, expected)

