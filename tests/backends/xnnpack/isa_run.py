"""Runs quantized programs (and one of XNNPACK's float elementwise nodes) on pterun and on ExecuTorch's runtime in
this process, as a CPU of some instruction set runs them, and prints one JSON report: what the process saw of
the CPU, and per case whether pterun's outputs equal ExecuTorch's, with a digest of pterun's outputs.

``test_xnnpack_isa.py`` starts it in subprocesses under oneDNN's and ATen's instruction-set ceilings
(``ONEDNN_MAX_CPU_ISA``, ``ATEN_CPU_CAPABILITY``) and under an emulated AVX2 CPU (qemu), so any machine proves
what another CPU computes. Usage: ``python -m tests.backends.xnnpack.isa_run PROGRAMS.json``, the file
mapping each case's program key to its .pte path.
"""

from __future__ import annotations

import hashlib
import json
import sys

import torch

from pterun import Runtime
from pterun.backends.xnnpack.nodes import isa
from tests.backends.xnnpack.programs import (
    CONV_MODELS,
    elementwise_inputs,
    float_convs_inputs,
    float_mlp_inputs,
    quantized_inputs,
)
from tests.support.oracle import run_reference

# Per program: its inputs (seed, scale, rows) and whether outputs must be equal ("exact"), the same bits, NaNs
# included ("bits"), or within a relative 1e-6 of the largest output ("relative": XNNPACK's float steps for
# 8-bit dynamic layers use fused multiply-adds that these products do not repeat).
STATIC = [(1, 1.0, None), (3, 8.0, None), (4, 100.0, None)]
CASES = {
    "mlp-per-channel": ("exact", STATIC),
    "mlp256-per-tensor": ("exact", STATIC),
    "mlp256-per-channel": ("exact", STATIC),
    "convnet-per-channel": ("exact", STATIC),
    "mobilenet-per-channel": ("exact", STATIC),
    "regnet-per-channel": ("exact", STATIC),
    "mlp256-dynamic": ("relative", STATIC),
    "8da4w": ("exact", [(1, 1.0, 8), (2, 0.05, 8), (3, 8.0, 8), (4, 100.0, 8)]),
    "8da4w-wide": ("exact", [(5, 1.0, 1), (6, 4.0, 3), (7, 1.0, 17), (8, 30.0, 32)]),
    # edge values open each input's first rows (programs.elementwise_inputs)
    "elementwise": ("bits", [(1, 1.0, 2), (2, 4.0, 3), (3, 30.0, 5), (4, 0.01, 64)]),
    "float-mlp": ("bits", [(1, 1.0, 1), (2, 4.0, 3), (3, 1.0, 9), (4, 30.0, 70)]),
    "float-convs": ("bits", [(1, 1.0, None), (2, 10.0, None)]),
}
SHAPES = {"mlp": (48,), "mlp256": (256,), "convnet": (3, 16, 16), "8da4w": (64,), "8da4w-wide": (512,)}
BATCH = {"mlp": 8, "mlp256": 32, "convnet": 2}


def _inputs(case: str, seed: int, scale: float, rows: int | None) -> list[torch.Tensor]:
    if case == "elementwise":
        return elementwise_inputs(seed, scale, rows=rows)
    if case == "float-mlp":
        return float_mlp_inputs(seed, scale, rows=rows if rows is not None else 9)
    if case == "float-convs":
        return float_convs_inputs(seed, scale)
    model = case if case.startswith("8da4w") else case.split("-")[0]
    if model in CONV_MODELS:
        return list(quantized_inputs(model, seed, scale))
    shape = (rows if rows is not None else BATCH[model], *SHAPES[model])
    # the generators of programs.quantized_inputs (seed + 100) and of the 8da4w tests (seed)
    offset = 0 if model.startswith("8da4w") else 100
    return [torch.randn(shape, generator=torch.Generator().manual_seed(offset + seed)) * scale]


def _digest(tensors) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def run(programs: dict[str, str]) -> dict:
    cpu = isa.cpu()
    report = {
        "aten": torch.backends.cpu.get_cpu_capability(),
        "features": sorted(cpu.features & {"avx2", "avx512_f", "avx512_vnni", "avx_vnni", "amx_int8"}),
        "block_kernels": cpu.block_kernels, "int_mm": cpu.int_mm, "onednn": cpu.onednn,
        "float_kernels": cpu.float_kernels,
        # what each integer product does here, unguarded: False where 16-bit pair sums saturate
        "int_mm_exact": isa._probe(isa._int_mm),
        "onednn_exact": isa.onednn_available() and isa._probe(isa._onednn),
        "cases": {},
    }
    for case, path in programs.items():
        check, inputs = CASES[case]
        method = Runtime.get().load_program(path).load_method("forward")
        routes = sorted({how for handle in method.delegate_handles for _, how in handle.routes})
        results, digests = [], []
        for seed, scale, rows in inputs:
            x = _inputs(case, seed, scale, rows)
            actual = method.execute(list(x))
            expected = run_reference(path, list(x))
            digests.append(_digest(actual))
            if check == "exact":
                results.append(int(sum((a != e).sum().item() for a, e in zip(actual, expected))))
            elif check == "bits":
                results.append(int(sum((a.contiguous().view(torch.int32) != e.contiguous().view(torch.int32))
                                       .sum().item() for a, e in zip(actual, expected))))
            else:
                results.append(max(((a - e).abs().max() / e.abs().max()).item() for a, e in zip(actual, expected)))
        report["cases"][case] = {"check": check, "results": results, "digest": _digest([]) if not digests
                                 else hashlib.sha256("".join(digests).encode()).hexdigest()[:16], "routes": routes}
    return report


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        print(json.dumps(run(json.load(f))))
