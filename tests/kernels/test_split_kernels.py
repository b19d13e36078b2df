"""kernels/split.py: the split copies registered for CUDA, whose logic runs on any device.

PyTorch's own CUDA kernel splits a permuted input, or into outputs of another dim order, wrongly (its fast
path assumes contiguous operands; tests/gpu/test_split_on_cuda.py checks pterun's on the GPU). The
registered kernel takes torch's path only for contiguous operands and copies each piece otherwise; that
choice, and what it computes, are checked here on the CPU, and the StableLM program the GPU corpus runs is
checked to give the split the permuted view that exposed it.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

import pterun
from pterun.core.device import DeviceType
from pterun.kernels import aten, default_registry

NAMES = {"aten::split_with_sizes_copy.out": [1, 2, 1], "aten::split_copy.Tensor_out": 1}


def _fn(name: str):
    return default_registry().lookup(name, DeviceType.CUDA)(5).fn


@pytest.mark.parametrize("name", sorted(NAMES))
def test_cuda_registers_its_own_split(name):
    registry = default_registry()
    assert registry.lookup(name, DeviceType.CUDA) is not registry.lookup(name, DeviceType.CPU)
    # Without its own, CUDA takes the CPU's.
    registry.unregister(name, DeviceType.CUDA)
    assert registry.lookup(name, DeviceType.CUDA) is registry.lookup(name, DeviceType.CPU)
    with pytest.raises(KeyError):
        registry.unregister(name, DeviceType.CUDA)


@pytest.mark.parametrize("name", sorted(NAMES))
@pytest.mark.parametrize("layout", ["contiguous", "permuted input", "transposed outputs"])
def test_split_copies_the_right_elements_whatever_the_strides(name, layout):
    sizes = NAMES[name]
    x = torch.randn(1, 4, 6, 8)
    if layout == "permuted input":
        x = torch.randn(1, 6, 4, 8).permute(0, 2, 1, 3)
    pieces = torch.split(x, sizes, 1)
    if layout == "transposed outputs":
        outs = [torch.empty(p.shape[0], p.shape[1], p.shape[3], p.shape[2]).transpose(2, 3) for p in pieces]
    else:
        outs = [torch.empty(p.shape) for p in pieces]
    _fn(name)(x, sizes, 1, out=outs)
    for out, piece in zip(outs, pieces):
        assert torch.equal(out, piece)


def test_a_split_into_too_few_outputs_is_an_error():
    x = torch.randn(4, 3).t()
    with pytest.raises(RuntimeError, match="makes 3 pieces; out holds 2"):
        _fn("aten::split_with_sizes_copy.out")(x, [1, 1, 1], 0, out=[torch.empty(1, 4), torch.empty(1, 4)])


def test_premise_the_corpus_stablelm_splits_a_permuted_view():
    """tests/gpu/test_corpus_on_cuda.py runs this model on CUDA: it covers the bug only while the program, as
    pterun loads it, hands a split a tensor that is not contiguous."""
    from tests.support.differential import export_model
    from tests.support.models import build

    name = "aten::split_with_sizes_copy.out"
    seen = []
    runtime = pterun.Runtime()
    generic = aten.aten_provider(name)

    def recording(count):
        binding = generic(count)

        def call(x, *args, **kwargs):
            seen.append(x.is_contiguous())
            return binding.fn(x, *args, **kwargs)

        return dataclasses.replace(binding, fn=call)

    runtime.registries.kernels.register(name, recording, DeviceType.CPU)
    exported = export_model("stablelm", "portable")
    runtime.load_program(exported.pte).load_method("forward").execute(list(build("stablelm").example_inputs))
    assert seen and False in seen, f"every split read a contiguous tensor: {seen}"
