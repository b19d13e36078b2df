"""A zero pad feeding a convolution, as the convolution with that padding (``pterun::padded_convolution``).

Models ported with TensorFlow's "same" padding (transformers' MobileNetV2, EfficientNet) pad every
convolution's input explicitly, and ExecuTorch keeps each ``constant_pad_nd`` as a step of its own: a copy of the
activation, larger, before every convolution, though most pads are the same on both sides of each dimension and
many pad nothing at all. Padding with zeros on both sides is what a convolution's own padding does, so the pad's
step goes and the convolution reads the pad's input with the two paddings added. Pads that differ between the two
sides of a dimension (a strided convolution's "same" padding, one row and column at the end) stay as they are.

On CUDA only: there cuDNN and PyTorch's depthwise kernel pad for free, and the pad was three launches (a fill, a
copy, and ATen's copy into ``out``). On the CPU, oneDNN's convolutions with the padding took longer than the pad
and the unpadded convolution (transformers' MobileNetV2 at 224x224, one thread, an AMD EPYC with AVX-512: 19.5-19.8
ms a call against 18.0-18.1, interleaved), so the CPU runs the file's steps.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from pterun.executor.load.fuse.common import Chain, Graph, scalar
from pterun.kernels import Binding, Functional
from pterun.kernels.conv_cuda import CONVOLUTION, PAD, convolution_out

ENDS = CONVOLUTION  # the operator of the step a chain ends at, which becomes its fused call

NAME = "pterun::padded_convolution"


class PaddedConvolution:
    """``convolution.out`` with the padding the chain found in place of the program's."""

    def __init__(self, padding: list[int]) -> None:
        self.padding = padding

    def __call__(self, input, weight, bias, stride, dilation, transposed, output_padding, groups, *, out):
        return convolution_out(input, weight, bias, stride, self.padding, dilation, transposed, output_padding,
                               groups, out=out)

    def functional(self, input, weight, bias, stride, dilation, transposed, output_padding, groups):
        return torch.ops.aten.convolution.default(input, weight, bias, stride, self.padding, dilation, transposed,
                                                  output_padding, groups)

    def __repr__(self) -> str:
        return f"PaddedConvolution(padding={self.padding})"


def match(g: Graph, n: int) -> Chain | None:
    """``convolution(constant_pad_nd(x, pad, 0), ...)`` ending at the convolution at step ``n``."""
    if not g.runs(n, ENDS) or g.value(g.arg(n, 6)) is not False:  # transposed: its padding crops the output
        return None
    pad_step = g.maker_of(n, 0)
    if not g.runs(pad_step, PAD) or scalar(g, g.arg(pad_step, 2)) != 0.0:
        return None
    padding = _combined(g.value(g.arg(pad_step, 1)), g.value(g.arg(n, 4)))
    x, padded = g.arg(pad_step, 0), g.arg(n, 0)
    xspec, pspec = g.tensor(x), g.tensor(padded)
    if padding is None or xspec is None or pspec is None or xspec.scalar_type != pspec.scalar_type:
        return None
    if len(xspec.sizes) != len(padding) + 2:
        return None
    weight, bias, out = g.arg(n, 1), g.arg(n, 2), g.made_value(n)
    kernel = PaddedConvolution(padding)
    args = (x, weight, bias, g.arg(n, 3), g.arg(n, 5), g.arg(n, 6), g.arg(n, 7), g.arg(n, 8), out)
    binding = Binding(kernel, tuple(range(8)), (("out", 8),), writes=(8,), strided=True,
                      functional=Functional(kernel.functional, outputs=(8,)))
    reads = (x, weight) + ((bias,) if g.tensor(bias) is not None else ())
    return Chain(NAME, frozenset((pad_step, n)), binding, args, reads)


def _combined(pad, padding) -> list[int] | None:
    """The convolution's padding with ``pad`` (pairs from the last dimension back) added, or None where ``pad``
    is not the same on both sides of each dimension, pads a dimension the convolution does not slide over, or
    is not a list of non-negative ints."""
    if not _ints(pad) or not _ints(padding) or len(pad) % 2:
        return None
    pairs = [(pad[k], pad[k + 1]) for k in range(0, len(pad), 2)]  # last dimension first
    if len(pairs) > len(padding) or any(before != after or before < 0 for before, after in pairs):
        return None
    combined = list(padding)
    for k, (before, _) in enumerate(pairs):
        combined[len(padding) - 1 - k] += before
    return combined


def _ints(values) -> bool:
    return isinstance(values, Sequence) and all(type(v) is int for v in values)
