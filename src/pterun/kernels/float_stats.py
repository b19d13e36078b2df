"""Normalization kernels for half-precision programs on CUDA.

ExecuTorch's programs give a normalization's statistics outputs (layer norm's
mean and reciprocal standard deviation, batch norm's saved mean and inverse
standard deviation) the input's dtype: float16 or bfloat16 in a half-precision
program. PyTorch's CUDA kernels compute the statistics in float32 and insist
on float32 out tensors for them ("Expected out tensor to have dtype float").
These kernels hand the CUDA kernel float32 scratch tensors for the statistics
and round them into the program's tensors afterwards, which is what
PyTorch's CPU kernels (and ExecuTorch's) store there. The scratch tensors are
kept between calls, so a method of fixed shapes allocates them once. (Batch norm with running statistics has a
kernel of its own on CUDA, which keeps float32 statistics too: conv_cuda.py.)
"""

from __future__ import annotations

import dataclasses

import torch

from pterun.kernels.aten import aten_kernel
from pterun.kernels.registry import Binding, KernelFactory

# Operator -> the keyword names of its statistics outputs.
STATISTICS = {
    "aten::native_layer_norm.out": ("out1", "out2"),
    "aten::_native_batch_norm_legit.out": ("save_mean", "save_invstd"),
    "aten::_native_batch_norm_legit.no_stats_out": ("save_mean", "save_invstd"),
    "aten::native_batch_norm.out": ("save_mean", "save_invstd"),
}

_HALF = (torch.float16, torch.bfloat16)


def float_statistics(name: str) -> KernelFactory:
    """The ATen kernel for ``name``, with float32 scratch for half-precision statistics outputs."""
    stats = STATISTICS[name]

    def factory(count: int) -> Binding:
        generic = aten_kernel(name)(count)
        fn = generic.fn
        scratch: dict[str, torch.Tensor] = {}

        def call(*args, **kwargs):
            swapped = [k for k in stats if kwargs[k].dtype in _HALF and kwargs[k].is_cuda]
            if not swapped:
                return fn(*args, **kwargs)
            outs = {k: kwargs[k] for k in swapped}
            for k in swapped:
                buffer = scratch.get(k)
                if buffer is None or buffer.device != outs[k].device:
                    buffer = scratch[k] = torch.empty(0, dtype=torch.float32, device=outs[k].device)
                buffer.resize_(0)
                kwargs[k] = buffer
            fn(*args, **kwargs)
            for k, out in outs.items():
                result = kwargs[k]
                if out.shape != result.shape:
                    out.resize_(result.shape)
                out.copy_(result)

        return dataclasses.replace(generic, fn=call)

    return factory
