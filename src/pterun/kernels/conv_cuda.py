"""A convolutional network's steps on CUDA, written straight into the planned ``out``.

PyTorch has no kernel of its own behind ``convolution.out``,
``_native_batch_norm_legit_no_training.out`` or ``constant_pad_nd.out``: each runs the functional operator,
which allocates its result, and copies that into ``out``. In a ConvNet these steps follow one another
(MobileNetV2: 52 pads, convolutions and batch norms each), so a method replayed from a CUDA graph ran a copy of
every activation per step besides the work itself, about 1.7 times the kernels' time of the same model run
eagerly in a CUDA graph. These kernels call what the functional operators call, into ``out``:

* a convolution the backend PyTorch would pick for it runs on cuDNN or on PyTorch's depthwise kernel
  (``torch._C._select_conv_backend``: the same choice, so the same kernels and numerics); any other
  (transposed, not two-dimensional, another backend) keeps the ATen kernel;
* batch norm with running statistics is one Triton kernel with the bits of PyTorch's three
  (triton/batch_norm.py), where the program leaves the statistics outputs empty (ExecuTorch plans them so, as
  PyTorch's CPU kernel leaves them); otherwise, or without Triton, ``_native_batch_norm_legit.out`` in inference,
  the kernel the functional form runs, its statistics in scratch tensors kept from call to call and copied into
  the outputs that have room for them;
* a constant pad fills ``out`` and copies its input into the middle (a pad of nothing is the copy alone).
"""

from __future__ import annotations

import dataclasses

import torch

from pterun.kernels.aten import aten_kernel
from pterun.kernels.registry import Binding, KernelFactory

CONVOLUTION = "aten::convolution.out"
BATCH_NORM = "aten::_native_batch_norm_legit_no_training.out"
PAD = "aten::constant_pad_nd.out"

_aten = torch.ops.aten
_CUDNN = torch._C._ConvBackend.Cudnn  # type: ignore[attr-defined]  # (torch stubs name it ConvBackend)
_DEPTHWISE = torch._C._ConvBackend.CudaDepthwise2d  # type: ignore[attr-defined]


def convolution_out(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, *, out):
    if input.is_cuda and input.dim() == 4 and not transposed:
        backend = torch._C._select_conv_backend(input, weight, bias, stride, padding, dilation, transposed,
                                                output_padding, groups, None)
        if backend == _CUDNN or backend == _DEPTHWISE:
            size = _output_size(input, weight, stride, padding, dilation)
            if out.shape != size:
                out.resize_(size)
            if backend == _DEPTHWISE:
                return _aten._conv_depthwise2d.out(input.contiguous(), weight, weight.shape[2:], bias, stride,
                                                   padding, dilation, out=out)
            # The flags at::convolution passes cuDNN; a method pins TF32 around its call (call/precision.py).
            _aten.cudnn_convolution.out(input, weight, padding, stride, dilation, groups,
                                        torch._C._get_cudnn_benchmark(),
                                        torch._C._get_cudnn_deterministic()
                                        or torch._C._get_deterministic_algorithms(),
                                        torch._C._get_cudnn_allow_tf32(), out=out)
            if bias is not None:
                out.add_(bias.reshape(1, -1, 1, 1))  # as at::convolution adds it after cuDNN's call
            return out
    return _aten.convolution.out(input, weight, bias, stride, padding, dilation, transposed, output_padding, groups,
                                 out=out)


def _output_size(input, weight, stride, padding, dilation) -> torch.Size:
    n, _, *spatial = input.shape
    return torch.Size((n, weight.shape[0], *(
        (size + 2 * p - d * (k - 1) - 1) // s + 1
        for size, k, s, p, d in zip(spatial, weight.shape[2:], stride, padding, dilation))))


def _batch_norm(count: int) -> Binding:
    generic = aten_kernel(BATCH_NORM)(count)
    scratch: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}  # (device, channels) -> mean, invstd
    try:
        from pterun.kernels.triton.batch_norm import applies, batch_norm_inference
    except ImportError:  # no Triton
        applies = None  # type: ignore[assignment]

    def call(input, weight, bias, running_mean, running_var, momentum, eps, *, out0, out1, out2):
        if not input.is_cuda:
            return generic.fn(input, weight, bias, running_mean, running_var, momentum, eps,
                              out0=out0, out1=out1, out2=out2)
        if out0.shape != input.shape:
            out0.resize_(input.shape)
        if (applies is not None and out1.numel() == 0 and out2.numel() == 0
                and applies(input, out0, weight, bias, running_mean, running_var)):
            return batch_norm_inference(input, weight, bias, running_mean, running_var, eps, out0)
        key = (input.device, running_mean.shape[0])
        stats = scratch.get(key)
        if stats is None:
            stats = scratch[key] = (torch.empty(key[1], dtype=torch.float32, device=input.device),
                                    torch.empty(key[1], dtype=torch.float32, device=input.device))
        mean, invstd = stats
        _aten._native_batch_norm_legit.out(input, weight, bias, running_mean, running_var, False, momentum, eps,
                                           out=out0, save_mean=mean, save_invstd=invstd)
        for target, value in ((out1, mean), (out2, invstd)):
            if target.numel() == value.numel():
                target.copy_(value.view(target.shape))

    return dataclasses.replace(generic, fn=call)


def pad_out(input, pad, value=0.0, *, out):
    if not input.is_cuda or len(pad) % 2 or len(pad) > 2 * input.dim() or any(p < 0 for p in pad):
        return _aten.constant_pad_nd.out(input, pad, value, out=out)  # cropping, or ATen's error
    size = list(input.shape)
    inner = []
    for dim, k in zip(range(input.dim() - 1, -1, -1), range(0, len(pad), 2)):
        before, after = pad[k], pad[k + 1]
        inner.append((dim, before, size[dim]))
        size[dim] += before + after
    if out.shape != tuple(size):
        out.resize_(size)
    middle = out
    for dim, start, length in inner:
        middle = middle.narrow(dim, start, length)
    if any(pad):
        out.fill_(value)
    middle.copy_(input)
    return out


def _replaced(name: str, fn) -> KernelFactory:
    def factory(count: int) -> Binding:
        return dataclasses.replace(aten_kernel(name)(count), fn=fn)

    return factory


FACTORIES: dict[str, KernelFactory] = {CONVOLUTION: _replaced(CONVOLUTION, convolution_out),
                                       BATCH_NORM: _batch_norm, PAD: _replaced(PAD, pad_out)}
