"""pterun's native kernels (``nodes/native.py``): built where CI runs, and bit for bit what the PyTorch path
computes, for every instruction set this CPU has and both XNNPACK kernel orders, so every pairing is proven on
any x86-64 machine. The PyTorch path is ExecuTorch's bits (test_xnnpack_qinteger.py, test_xnnpack_isa.py); the
programs here also run against ExecuTorch directly."""

from __future__ import annotations

import dataclasses
import math
import platform
import re
import shutil
import subprocess
import sysconfig
from pathlib import Path

import numpy as np
import pytest
import torch

import pterun
from pterun.backends.xnnpack.nodes import isa, native
from tests.backends.xnnpack.programs import WIDE_8DA4W_ROWS, export_8da4w, export_8da4w_wide, export_quantized
from tests.support.ci import on_ci
from tests.support.oracle import run_reference

X86 = platform.machine() in ("x86_64", "AMD64")


def test_the_native_kernels_are_built_where_ci_runs():
    built, why = native.available()
    if not built and (on_ci() or X86):
        pytest.fail(f"{why} (the README's install builds them; CI must have them)", pytrace=False)
    assert native.kernel_isa() in ("avx512vnni", "avx2", "portable")
    if X86 and "avx2" in isa.features():
        assert native.kernel_isa() != "portable"


AARCH64_GCC = shutil.which("aarch64-linux-gnu-gcc")


def _aarch64_toolchain_missing() -> str | None:
    """Why the cross-compiler cannot build a CPython extension here, or None: the compiler and its C library's
    headers come in two packages (Python.h includes <unistd.h>, and the compiler alone falls back on the host's)."""
    if AARCH64_GCC is None:
        return "aarch64-linux-gnu-gcc is not installed (apt-get install gcc-aarch64-linux-gnu)"
    probe = subprocess.run([AARCH64_GCC, "-E", "-x", "c", "-", "-o", "/dev/null"], input="#include <unistd.h>\n",
                           capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        return "AArch64's C library headers are not installed (apt-get install libc6-dev-arm64-cross)"
    return None


def test_the_native_kernels_compile_for_aarch64_without_a_warning(tmp_path):
    """On an AArch64 machine the extension builds from the same sources, its x86 kernels left out: every kernel then
    takes its portable C or PyTorch's path. No machine of that kind runs the suite, so a cross-compiler checks that
    the x86 sections stay fenced (the sources as setup.py lists them, its flags, warnings as errors)."""
    message = _aarch64_toolchain_missing()
    if message is not None:
        if on_ci():
            pytest.fail(f"{message}; on CI (CI=true) it must be (.ci/run installs it)", pytrace=False)
        pytest.skip(message)
    root = Path(__file__).resolve().parents[3]
    sources = re.findall(r'"(\w+)"', re.search(r"for name in \(([^)]*)\)", (root / "setup.py").read_text()).group(1))
    assert "module" in sources and "gemm" in sources, sources  # the premise: setup.py's list was read
    include = sysconfig.get_paths()["include"]
    for name in sources:
        done = subprocess.run(
            [AARCH64_GCC, "-c", "-O2", "-std=c11", "-ffp-contract=off", "-fvisibility=hidden", "-Wall", "-Werror",
             "-fPIC", "-DPy_LIMITED_API=0x030B0000", f"-I{include}", str(root / "src/pterun/native" / f"{name}.c"),
             "-o", str(tmp_path / f"{name}.o")], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{name}.c: {done.stderr[-3000:]}"


def _isas() -> list[str]:
    best = native.kernel_isa() if native.available()[0] else "portable"
    return {"avx512vnni": ["portable", "avx2", "avx512vnni"], "avx2": ["portable", "avx2"]}.get(best, ["portable"])


def _method(pte, **options):
    backend = {"XnnpackBackend": options} if options else None
    return pterun.Runtime.get().load_program(pte, backend_options=backend).load_method("forward")


def _routes(method) -> list[str]:
    return [how for handle in method.delegate_handles for _, how in handle.routes]


@pytest.mark.parametrize("family", ["avx512vnni", "avx2"])
@pytest.mark.parametrize("kernel", _isas())
def test_4bit_block_layers_match_the_pytorch_path_bit_for_bit(kernel, family, monkeypatch):
    """Each instruction set's kernels in each XNNPACK order (the pairings XNNPACK itself never runs go to the
    portable code), on decode and prefill shapes and blocks of 32 and 128, with and without a bias."""
    monkeypatch.setattr(native, "kernel_isa", lambda: kernel)
    forced = dataclasses.replace(isa.cpu(), block_kernels=family)
    monkeypatch.setattr(isa, "cpu", lambda: forced)
    # an instruction set runs the order XNNPACK runs with it (and AVX-512 CPUs the avx2 order with AVX2); the
    # portable code every other pairing
    expected = {("avx512vnni", "avx512vnni"): "avx512vnni", ("avx512vnni", "avx2"): "avx2",
                ("avx2", "avx2"): "avx2"}.get((kernel, family), "portable")
    for exported, shapes in ((export_8da4w(), [(8, 64)]),
                             (export_8da4w_wide(), [(1, 512), (3, 512), (17, 512), (WIDE_8DA4W_ROWS, 512)])):
        fast, plain = _method(exported.pte), _method(exported.pte, native=False)
        assert all(f"({family}" not in r or f"native, {expected})" in r for r in _routes(fast)), _routes(fast)
        assert not any("native" in r for r in _routes(plain))
        for i, shape in enumerate(shapes):
            x = torch.randn(shape, generator=torch.Generator().manual_seed(i)) * (1.0, 30.0, 0.01, 4.0)[i % 4]
            a, b = fast.execute([x])[0], plain.execute([x])[0]
            assert torch.equal(a, b), (
                f"{exported.key} {shape} on {kernel} in the {family} order: {(a != b).sum()} differ")


def _qd8_row(row: np.ndarray) -> tuple[np.ndarray, float, float]:
    """XNNPACK's qd8 quantization of one float32 row as its x86 kernels compute it, the range taken in the row's
    order (which decides where a NaN is): the int8 row, its zero point and its dequantization scale."""
    f = np.float32
    lo = hi = row[0] if len(row) else f(0)
    for v in row[1:]:
        lo, hi = (v if v < lo else lo), (v if v > hi else hi)
    rmin, rmax = (lo if lo < 0 else f(0)), (f(0) if hi < 0 else hi)  # x86's minss / maxss against 0
    s = f(1) if rmin == rmax else f(255) / (rmax - rmin)
    low, high = rmin * s, rmax * s
    zp = (f(-128) - low) if (f(-128) + low) + (f(127) + high) > 0 else (f(127) - high)
    zp = zp if f(-128) < zp else f(-128)
    z = int(np.rint(zp if zp < f(127) else f(127)))
    v = row * s
    v = np.where(v < f(32767), v, f(32767))  # a NaN gives 32767
    n = np.where(v >= f(-32768), np.rint(np.nan_to_num(v)), f(-32768)).astype(np.int64) + z
    return np.clip(n, -128, 127).astype(np.int8), float(z), float(f(1) / s)


def hard_rows() -> list[torch.Tensor]:
    """Rows of every width's remainder after the vector lanes, with NaN, infinities and -0.0 anywhere, zeros of
    both signs, and ranges so small that the scale is infinite and so wide that it is tiny."""
    generator = torch.Generator().manual_seed(7)
    rows = []
    for width in (1, 7, 8, 15, 16, 17, 33, 100, 768, 2500):
        base = torch.randn(width, generator=generator) * 3
        rows += [base, base * 1e-39, base * 1e37, torch.zeros(width), -torch.zeros(width), base.abs(), -base.abs()]
        for at in {0, width // 2, width - 1}:
            for special in (math.nan, math.inf, -math.inf, -0.0):
                row = base.clone()
                row[at] = special
                rows.append(row)
    return rows


@pytest.mark.parametrize("kernel", _isas())
def test_rows_are_quantized_as_xnnpack_does_it_on_every_instruction_set(kernel):
    """Every width's remainder after the vector lanes, NaN anywhere in a row (the scalar loop decides those),
    infinities, zeros of both signs, ranges so small that the scale is infinite and so wide that it is tiny."""
    for row in hard_rows():
        x = row.reshape(1, -1).contiguous()
        q, zp, scale = torch.empty(x.shape, dtype=torch.int8), torch.empty(1), torch.empty(1)
        native._kernels().quantize_rows(native.ISAS[kernel], x.data_ptr(), 1, x.shape[1], x.shape[1], q.data_ptr(),
                                        x.shape[1], zp.data_ptr(), scale.data_ptr())
        with np.errstate(all="ignore"):
            q_expected, zp_expected, scale_expected = _qd8_row(row.numpy())
        assert np.array_equal(q.numpy()[0], q_expected), (kernel, row)
        assert zp.item() == zp_expected and scale.numpy()[0].tobytes() == np.float32(scale_expected).tobytes()


def test_native_layers_match_executorch_at_every_row_count():
    """The CPU's own kernels against ExecuTorch's runtime, rows 1 to 32: every remainder of the row blocks."""
    exported = export_8da4w_wide()
    method = _method(exported.pte)
    assert any("native" in r for r in _routes(method)), _routes(method)
    for rows in range(1, WIDE_8DA4W_ROWS + 1):
        x = torch.randn(rows, 512, generator=torch.Generator().manual_seed(rows)) * 3
        (actual,) = method.execute([x])
        (expected,) = run_reference(exported.pte, [x])
        assert torch.equal(actual, expected), f"{rows} rows: {(actual != expected).sum()} differ"


def test_dynamic_8bit_layers_are_executorchs_bits():
    """Rows quantized natively (int8 first) times 8-bit weights, with XNNPACK's float steps (times the row's
    scale, then a fused multiply-add of the channel's scale and the bias): ExecuTorch's outputs bit for bit,
    rows of zeros and of so small a range that the scale is infinite included. (The PyTorch path rounds the
    multiply-add twice: within float32 rounding.)"""
    exported = export_quantized("mlp256", "dynamic")
    fast = _method(exported.pte)
    assert "quantize_rows(" in fast.delegate_handles[0].source
    assert sum(r.startswith("native int8 product") for r in _routes(fast)) == 3
    x = torch.randn(32, 256, generator=torch.Generator().manual_seed(3)) * 5
    x[0], x[1, :128], x[1, 128:] = 0.0, -1e-38, 0.0
    assert torch.equal(fast.execute([x])[0], run_reference(exported.pte, [x])[0])


def test_native_off_is_said_and_the_layers_still_exact():
    exported = export_8da4w()
    method = _method(exported.pte, native=False)
    assert "native kernels turned off" in method.delegate_handles[0].cpu
    x = torch.randn(8, 64, generator=torch.Generator().manual_seed(5))
    assert torch.equal(method.execute([x])[0], run_reference(exported.pte, [x])[0])


def test_a_caller_output_of_any_strides_is_written_right():
    """Kernels write contiguous rows: a delegate output the caller gave with other strides is written through a
    buffer of their own, never past its end."""
    from pterun.backends.xnnpack.backend import XnnpackDelegate
    from tests.backends.xnnpack.programs import graphs

    exported = export_8da4w()
    (graph,) = graphs(exported.pte)
    delegate = XnnpackDelegate(graph, torch.device("cpu"))
    x = torch.randn(8, 64, generator=torch.Generator().manual_seed(6))
    wide = torch.full((8, 128), 7.0)
    out = wide[:, ::2]  # [8, 64] with a stride of 2
    delegate([x, out])
    assert torch.equal(wide[:, 1::2], torch.full((8, 64), 7.0))  # nothing between the elements written
    assert torch.equal(out, run_reference(exported.pte, [x])[0])


def test_threads_split_the_outputs_and_change_no_bit():
    """The kernels split a layer's outputs over the method's threads (PyTorch's OpenMP team, the caller's
    thread among them): the same bits at 1 and 2 threads, calls from several Python threads at once included."""
    import threading

    exported = export_8da4w_wide()
    x = torch.randn(WIDE_8DA4W_ROWS, 512, generator=torch.Generator().manual_seed(9))
    results = {}
    for threads in (1, 2):
        method = pterun.Runtime.get().load_program(exported.pte, num_threads=threads).load_method("forward")
        assert method.num_threads == threads, method.num_threads_reason  # the premise
        results[threads] = method.execute([x])[0]
    assert torch.equal(results[1], results[2])
    program = pterun.Runtime.get().load_program(exported.pte, num_threads=2)
    methods = [program.load_method("forward", cached=False) for _ in range(3)]
    outputs = [None] * 3

    def call(i):
        for _ in range(20):
            outputs[i] = methods[i].execute([x])[0]

    workers = [threading.Thread(target=call, args=(i,)) for i in range(3)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert all(torch.equal(o, results[1]) for o in outputs)


def _packed_4bit_layer(n: int, k: int):
    from pterun.native import _kernels

    g = torch.Generator().manual_seed(3)
    weights = torch.randint(0, 256, (n * k // 2,), dtype=torch.uint8, generator=g)
    # Block scales bfloat16 can hold, as ExecuTorch writes them: the SIMD layouts take the layer.
    scales = (torch.rand(n, k // 32, generator=g) / 64).bfloat16().float()
    start = torch.randn(n, generator=g)
    best = native.kernel_isa()
    layer = _kernels.qb4w_pack(native.ISAS[best], native.FAMILIES["avx512vnni" if best == "avx512vnni" else "avx2"],
                               n, k, 32, weights.data_ptr(), scales.data_ptr(), start.data_ptr(), 0, -math.inf,
                               math.inf)
    if X86 and best != "portable":
        assert _kernels.qb4w_isa(layer) == best, "premise: the SIMD code takes the layer"
    x = torch.randint(-128, 128, (3, k), dtype=torch.int8, generator=g)
    zero_points, x_scales = torch.tensor([1.0, -3.0, 0.0]), torch.tensor([0.02, 0.5, 0.01])

    def run(threads: int) -> torch.Tensor:
        out = torch.empty(3, n)
        _kernels.qb4w_run(layer, 3, x.data_ptr(), k, zero_points.data_ptr(), x_scales.data_ptr(), out.data_ptr(),
                          n, threads)
        return out

    return run


@pytest.mark.skipif(not native.available()[0], reason="the native kernels are not built here")
def test_kernels_split_work_on_pytorchs_threads_and_on_their_own_in_a_forked_child():
    """Where PyTorch runs GNU OpenMP, the kernels split work on its team (its threads spin after each
    operator and held the cores workers of their own needed); in a forked child, which has no team, on their
    own workers. The same bits either way."""
    import os

    from pterun.native import _kernels

    if platform.system() == "Linux" and X86:
        assert _kernels.parallel_team(), "premise: PyTorch's Linux x86 build runs GNU OpenMP"
    run = _packed_4bit_layer(4096, 1024)
    expected = run(1)
    assert torch.equal(run(2), expected)
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # the child: its own workers, no PyTorch operator run
        try:
            ok = not _kernels.parallel_team() and torch.equal(run(2), expected)
            os.write(write, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(write)
    answer = os.read(read, 1)
    os.close(read)
    os.waitpid(child, 0)
    assert answer == b"1", "the forked child ran on workers of its own and got the same bits"
    assert torch.equal(run(2), expected), "the parent still runs on PyTorch's team afterwards"


@pytest.mark.parametrize("kernel", _isas())
@pytest.mark.parametrize(("model", "scheme"), [("mlp256", "per-channel"), ("mlp256", "dynamic"),
                                               ("convnet", "per-channel"), ("mlp", "per-tensor"),
                                               ("mobilenet", "per-channel"), ("regnet", "per-channel")])
def test_8bit_layers_on_every_instruction_set_are_executorchs_bits(kernel, model, scheme, monkeypatch):
    """Static and dynamic 8-bit layers, static convolutions (dense, grouped, depthwise), 8-bit adds, multiplies
    and converts with each instruction set's kernels: the same bits as ExecuTorch's, every integer sum exact and
    XNNPACK's float steps repeated."""
    from tests.backends.xnnpack.programs import quantized_inputs

    monkeypatch.setattr(native, "kernel_isa", lambda: kernel)
    exported = export_quantized(model, scheme)
    method = _method(exported.pte)
    routes = _routes(method)
    assert any(r == f"native int8 product ({kernel})" for r in routes), routes
    if model in ("convnet", "mobilenet", "regnet"):
        kinds = {"convnet": ("depthwise convolution", "add", "mul"), "mobilenet": ("depthwise convolution", "add"),
                 "regnet": ("grouped convolution", "add", "mul")}[model]
        wanted = {"native int8 dense convolution", *(f"native int8 {k}" for k in kinds), "native quantize",
                  "native dequantize"}
        assert {f"{w} ({kernel})" for w in wanted} <= set(routes), routes
    for seed, scale in ((1, 1.0), (3, 8.0), (4, 100.0)):
        x = list(quantized_inputs(model, seed, scale))
        (actual,) = method.execute(x)
        (expected,) = run_reference(exported.pte, x)
        assert torch.equal(actual, expected), f"{model} {scheme} x{scale} on {kernel}: {(actual != expected).sum()}"


def test_convolutions_split_over_threads_change_no_bit():
    """A convolution's rows and output tiles, and an add's elements, split over the method's threads: the same
    bits at 1 and 2 threads."""
    from tests.backends.xnnpack.programs import quantized_inputs

    exported = export_quantized("mobilenet", "per-channel")
    x = list(quantized_inputs("mobilenet", 5, 2.0))
    results = []
    for threads in (1, 2):
        method = pterun.Runtime.get().load_program(exported.pte, num_threads=threads).load_method("forward")
        assert method.num_threads == threads, method.num_threads_reason  # the premise
        results.append(method.execute(x)[0])
    assert torch.equal(results[0], results[1])
    assert torch.equal(results[0], run_reference(exported.pte, x)[0])


@pytest.mark.parametrize("layout", ["avx512vnni", "avx2"])
def test_a_4bit_layer_a_simd_layout_cannot_hold_exactly_takes_the_portable_code(layout):
    """The SIMD layouts keep block scales as bfloat16 (as ExecuTorch writes them): a layer with a scale that is
    no bfloat16 (a file's float32 scales) is packed for the portable code, which keeps them whole, and gives
    the portable code's results."""
    if layout not in _isas():
        pytest.skip(f"needs a CPU with {layout} (the layout under test)")
    kernels, family = native._kernels(), native.FAMILIES[layout]
    n, k, block = 48, 128, 32
    generator = torch.Generator().manual_seed(11)
    weights = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, generator=generator)
    start, x = torch.randn(n, generator=generator), torch.randint(-128, 128, (3, k), dtype=torch.int8,
                                                                     generator=generator)
    zp, xs = torch.tensor([3.0, -7.0, 0.0]), torch.tensor([0.02, 0.5, 1.0])

    def run(scales: torch.Tensor, isa_name: str) -> tuple[str, torch.Tensor]:
        layer = kernels.qb4w_pack(native.ISAS[isa_name], family, n, k, block, weights.data_ptr(), scales.data_ptr(),
                                  start.data_ptr(), 0, -math.inf, math.inf)
        out = torch.empty(3, n)
        kernels.qb4w_run(layer, 3, x.data_ptr(), k, zp.data_ptr(), xs.data_ptr(), out.data_ptr(), n, 1)
        return kernels.qb4w_isa(layer), out

    bf16 = torch.rand(n, k // block, generator=generator).bfloat16().float()
    assert run(bf16, layout)[0] == layout, "premise: bfloat16 scales take the SIMD layout"
    assert torch.equal(run(bf16, layout)[1], run(bf16, "portable")[1])
    wide = bf16.clone()
    wide[5, 2] = 0.1  # not a bfloat16
    isa_taken, out = run(wide, layout)
    assert isa_taken == "portable"
    assert torch.equal(out, run(wide, "portable")[1])


def test_a_4bit_layer_of_long_rows_and_many_of_them_gives_the_portable_codes_bits():
    """The avx512vnni kernel takes each row's sum over each block back from its products and keeps those sums
    on the stack, rows in groups that fit it: inputs of 16,384 (512 blocks) and 70 rows make three groups;
    weights and activations at their extremes (-8 and 7; -128 and 127) besides random ones."""
    if "avx512vnni" not in _isas():
        pytest.skip("needs a CPU with avx512vnni (the layout under test)")
    kernels, family = native._kernels(), native.FAMILIES["avx512vnni"]
    n, k, block, rows = 40, 16384, 32, 70
    generator = torch.Generator().manual_seed(5)
    weights = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, generator=generator)
    weights[0], weights[1] = 0x00, 0xFF  # every weight -8, every weight 7 (nibbles stored plus 8)
    x = torch.randint(-128, 128, (rows, k), dtype=torch.int8, generator=generator)
    x[0], x[1] = -128, 127
    start = torch.randn(n, generator=generator)
    scales = torch.rand(n, k // block, generator=generator).bfloat16().float()
    zp, xs = torch.randint(-128, 128, (rows,), generator=generator).float(), torch.rand(rows, generator=generator)

    def run(isa_name: str) -> tuple[str, torch.Tensor]:
        layer = kernels.qb4w_pack(native.ISAS[isa_name], family, n, k, block, weights.data_ptr(), scales.data_ptr(),
                                  start.data_ptr(), 0, -math.inf, math.inf)
        out = torch.empty(rows, n)
        kernels.qb4w_run(layer, rows, x.data_ptr(), k, zp.data_ptr(), xs.data_ptr(), out.data_ptr(), n, 1)
        return kernels.qb4w_isa(layer), out

    taken, out = run("avx512vnni")
    assert taken == "avx512vnni", "premise: the SIMD layout takes the layer"
    assert torch.equal(out, run("portable")[1])


@pytest.mark.parametrize("block", [32, 64, 256])
def test_4bit_start_values_from_the_packed_nibbles_are_the_pytorch_paths(block):
    """A 4-bit layer's start values (-sum(weight * scale), chunk by chunk in XNNPACK's order) computed natively from
    the packed nibbles are those of the PyTorch path's unpacked integers, bit for bit, at scales of every size."""
    from pterun.backends.xnnpack.nodes import qblock, qlinear

    assert native.available()[0], "premise: the native kernels are built"
    for seed, (n, blocks, magnitude) in enumerate([(1, 1, 1.0), (7, 3, 1e-3), (130, 5, 1e3), (64, 2, 1.0)]):
        g = torch.Generator().manual_seed(seed)
        k = block * blocks
        weights = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, generator=g)
        scales = (torch.rand(n, blocks, generator=g) * magnitude).bfloat16().float()
        expected = qblock._start_sums(qlinear.unpack_4bit(weights, k), scales, block)
        b = dataclasses.make_dataclass("B", ["where"])("a test layer")
        actual = native.qb4w_start_sums(b, n, k, block, qblock._chunk(block), weights, scales)
        assert torch.equal(actual, expected), (n, k, block)
