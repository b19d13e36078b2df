"""XNNPACK delegates run on a GPU: ``load_program(..., device="cuda")``.

The same blobs as the CPU tests, with constants and buffers placed on the GPU
at init. Results are compared with pterun's CPU run of the same program (which
the CPU tests compare with ExecuTorch's XNNPACK), so these need neither the
exporter nor ExecuTorch where they run, only the exported programs.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

import pterun
from pterun.backends.xnnpack.nodes import isa
from tests.backends.xnnpack.programs import (
    WIDE_8DA4W_ROWS,
    assert_relative,
    assert_within_one_step,
    export_8da4w,
    export_8da4w_wide,
    export_model,
    export_quantized,
    export_zoo,
    output_steps,
    quantized_inputs,
    zoo_inputs,
)
from tests.support.differential import flat

pytestmark = pytest.mark.gpu


def _float_variants(args: list, seed: int) -> list:
    g = torch.Generator().manual_seed(seed)
    return [a + 0.1 * torch.randn(a.shape, generator=g) if a.is_floating_point() else a for a in args]


def _cases():
    yield "resnet", lambda: export_model("resnet"), None
    yield "vit", lambda: export_model("vit"), None
    yield "zoo", export_zoo, zoo_inputs
    yield "q-convnet-per-channel", lambda: export_quantized("convnet", "per-channel"), "q"
    yield "q-decoder-per-tensor", lambda: export_quantized("decoder", "per-tensor"), "q"
    yield "q-convnet-dynamic", lambda: export_quantized("convnet", "dynamic"), "q"
    yield "8da4w", export_8da4w, lambda seed: [torch.randn(8, 64, generator=torch.Generator().manual_seed(seed))]


CASES = {name: (export, inputs) for name, export, inputs in _cases()}


def _tensors(obj):
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _tensors(v)
    elif isinstance(obj, (tuple, list)):
        for v in obj:
            yield from _tensors(v)


def _on_cuda(method) -> None:
    """Every constant and buffer the delegates made at init lives on the GPU."""
    tensors = []
    for delegate in method.delegate_handles:
        assert delegate.device.type == "cuda"
        tensors += list(_tensors(delegate._cache))
    assert tensors and all(t.device.type == "cuda" for t in tensors), "a constant or buffer stayed off the GPU"


@pytest.mark.parametrize("name", list(CASES))
def test_xnnpack_delegate_runs_on_cuda(name):
    export, make_inputs = CASES[name]
    exported = export()
    cpu = pterun.Runtime.get().load_program(exported.pte).load_method("forward")
    gpu = pterun.Runtime.get().load_program(exported.pte, device="cuda").load_method("forward")
    _on_cuda(gpu)
    steps = output_steps(exported.pte) if make_inputs == "q" else None
    model = name.split("-")[1] if make_inputs == "q" else None
    for seed in (1, 2, 3):
        if make_inputs == "q":
            args = list(quantized_inputs(model, seed, (1.0, 0.05, 8.0)[seed - 1]))
        elif make_inputs is not None:
            args = make_inputs(seed)
        else:
            args = _float_variants(flat(exported.forward_inputs()), seed)
        expected = cpu.execute(args)
        actual = gpu.execute([a.cuda() for a in args])
        assert all(a.device.type == "cuda" for a in actual)
        for i, (a, e) in enumerate(zip(actual, expected)):
            what = f"{name} seed {seed} output {i}"
            if steps and steps[i] is not None:
                assert_within_one_step(a.cpu(), e, steps[i], what)
            elif name == "8da4w":  # 4-bit products in the order of the CPU's kernels on the GPU too (nodes/qblock.py)
                assert torch.equal(a.cpu(), e), f"{what}: {(a.cpu() - e).abs().max().item():.3g} off"
            else:
                assert_relative(a.cpu(), e, 1e-4, what)


def test_dynamic_lengths_on_cuda():
    exported = export_model("llama_dynamic")
    cpu = pterun.Runtime.get().load_program(exported.pte).load_method("forward")
    gpu = pterun.Runtime.get().load_program(exported.pte, device="cuda").load_method("forward")
    (tokens,) = flat(exported.forward_inputs())
    for length in (tokens.shape[1], 3, 32, 1):
        ids = torch.arange(length).reshape(1, length) % 100
        expected = cpu.execute([ids])
        actual = gpu.execute([ids.cuda()])
        assert_relative(actual[0].cpu(), expected[0], 1e-4, f"length {length}")


@pytest.mark.parametrize("kernel", ["triton", "torch"])
@pytest.mark.parametrize("family", ["avx512vnni", "avx2"])
def test_4bit_layers_on_cuda_are_the_cpus_in_each_order(family, kernel, monkeypatch):
    """8da4w layers on the GPU in each XNNPACK order (the CPU's forced to it too), by the Triton kernels and by
    PyTorch's ops (native=False): decode and prefill rows, blocks of 32 and 128, with and without a bias."""
    forced = dataclasses.replace(isa.cpu(), block_kernels=family)
    monkeypatch.setattr(isa, "cpu", lambda: forced)
    options = {"XnnpackBackend": {"native": False}} if kernel == "torch" else None
    for exported, shapes in ((export_8da4w(), [(8, 64)]),
                             (export_8da4w_wide(), [(1, 512), (3, 512), (17, 512), (WIDE_8DA4W_ROWS, 512)])):
        cpu = pterun.Runtime.get().load_program(exported.pte).load_method("forward")
        gpu = pterun.Runtime.get().load_program(exported.pte, device="cuda",
                                                backend_options=options).load_method("forward")
        marker = "(Triton)" if kernel == "triton" else "(float32 lane sums)"
        for i, shape in enumerate(shapes):
            x = torch.randn(shape, generator=torch.Generator().manual_seed(i)) * (1.0, 30.0, 0.01, 4.0)[i % 4]
            expected, actual = cpu.execute([x])[0], gpu.execute([x.cuda()])[0].cpu()
            if i == 0:  # premise: the path under test, in the order asked for
                routes = [way for d in gpu.delegate_handles for _, way in d.routes if "4-bit" in way]
                assert routes and all(marker in r and family in r for r in routes), routes
            assert torch.equal(actual, expected), (
                f"{exported.key} {shape}, {family} order, {kernel}: {(actual != expected).sum()} differ")


def test_rows_quantize_on_cuda_as_xnnpack_does_it():
    """The Triton kernel of the dynamic row quantization against XNNPACK's scalar steps (those the CPU's
    kernels are held to), on the rows that test them: NaN, infinities, zeros of both signs, extreme ranges."""
    import numpy as np

    from pterun.backends.xnnpack.nodes.qd8_triton import quantize_rows
    from tests.backends.xnnpack.test_xnnpack_native import _qd8_row, hard_rows

    for row in hard_rows():
        x = row.reshape(1, -1).cuda()
        q, zp, scale = (torch.empty(x.shape, dtype=torch.int8, device="cuda"), torch.empty(1, 1, device="cuda"),
                        torch.empty(1, 1, device="cuda"))
        quantize_rows(x, q, zp, scale)
        with np.errstate(all="ignore"):
            q_expected, zp_expected, scale_expected = _qd8_row(row.numpy())
        assert np.array_equal(q.cpu().numpy()[0], q_expected), row
        assert zp.item() == zp_expected, row
        scale = scale.cpu().numpy()[0]
        if np.isnan(scale_expected):  # NaN's bits are the hardware's (x86's default NaN, CUDA's canonical one)
            assert np.isnan(scale).all(), row
        else:
            assert scale.tobytes() == np.float32(scale_expected).tobytes(), row

