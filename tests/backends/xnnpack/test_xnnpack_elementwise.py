"""XNNPACK's float elementwise nodes bit for bit: its runtime computes sigmoid, reciprocal square root, square
root, sin, cos, exp, tanh, gelu, log, hardswish, elu and softmax with approximations of its own, one family of
kernels per CPU (``nodes/isa.py``), with denormals flushed; pterun's native kernels repeat the family this CPU
runs (``native/vunary.c``, ``native/vsoftmax.c``).

* A program lowered with XnnpackPartitioner holding each of these nodes, against ExecuTorch's runtime: normal
  values at several scales, edge values (zeros, infinities, NaN, huge, tiny and denormal numbers, the ends of
  the kernels' ranges), rows of every length around the softmax kernels' vector and block boundaries, and
  enough of them for the work to be split over threads. ELU, which the partitioner does not lower, through a
  hand-built blob.
* The other x86-64 family (AVX2) on an emulated AVX2 CPU: test_xnnpack_isa.py.
* Turned off (``native=False``), PyTorch's functions compute these nodes: within float32 rounding.
"""

from __future__ import annotations

import math
import platform

import pytest
import torch

import pterun
from pterun.backends.xnnpack._generated import xnngraph_generated as fb
from pterun.backends.xnnpack.nodes import isa, native
from tests.backends.xnnpack.crafted import splice, unary_graph, with_header
from tests.backends.xnnpack.programs import (
    EDGE_VALUES,
    ELEMENTWISE_MAX,
    ELEMENTWISE_NODES,
    ELEMENTWISE_OUTPUTS,
    elementwise_inputs,
    export_elementwise,
    export_model,
    graphs,
    node_kinds,
)
from tests.support.ci import on_ci
from tests.support.oracle import run_reference

X86 = platform.machine() in ("x86_64", "AMD64")


def _method(pte, **load):
    return pterun.Runtime.get().load_program(pte, **load).load_method("forward")


def _routes(method) -> list[str]:
    return [how for handle in method.delegate_handles for _, how in handle.routes]


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int32)


def _assert_bits(actual, expected, names, what: str) -> None:
    """Every output the same bits (NaNs included)."""
    assert len(actual) == len(expected) == len(names)
    for a, e, name in zip(actual, expected, names):
        assert a.shape == e.shape, f"{what}, {name}: {a.shape} against {e.shape}"
        differ = _bits(a) != _bits(e)
        assert not differ.any(), (f"{what}, {name}: {int(differ.sum())} of {a.numel()} differ, e.g. pterun "
                                  f"{a[differ][:4].tolist()} ExecuTorch {e[differ][:4].tolist()}")


@pytest.fixture(scope="module")
def program():
    exported = export_elementwise()
    assert ELEMENTWISE_NODES <= set(node_kinds(exported.pte)), node_kinds(exported.pte)
    return exported.pte


@pytest.fixture(scope="module")
def method(program):
    if native.float_family() is None:
        message = f"XNNPACK's float kernels are not repeated here ({isa.cpu().summary}; {native.available()[1]})"
        if X86 and {"avx2", "fma3"} <= isa.features():
            pytest.fail(message, pytrace=False)  # every x86-64 machine CI runs on has AVX2: it must have them
        pytest.skip(message)
    method = _method(program)
    # the premises: every one of those nodes computes natively, in this CPU's family
    routes = _routes(method)
    family = isa.cpu().float_kernels
    assert sum(f"XNNPACK's {family} float" in r and "(native)" in r for r in routes) == len(ELEMENTWISE_OUTPUTS)
    source = method.delegate_handles[0].source
    assert source.count("vunary(") == len(ELEMENTWISE_OUTPUTS) - 1 and source.count("softmax(") == 1, source
    return method


def test_the_float_family_follows_the_cpu():
    """The family is XNNPACK's choice for this CPU's features; the kernels are there wherever CI runs."""
    assert isa.cpu().float_kernels == isa.float_kernels(isa.features(), platform.machine())
    if X86 and {"avx2", "fma3"} <= isa.features() and (native.available()[0] or on_ci()):
        assert native.float_family() == isa.cpu().float_kernels


@pytest.mark.parametrize(("seed", "scale"), [(1, 1.0), (2, 4.0), (3, 30.0), (4, 100.0), (5, 0.01)])
def test_elementwise_nodes_are_executorchs_bits(program, method, seed, scale):
    x = elementwise_inputs(seed, scale)
    _assert_bits(method.execute(x), run_reference(program, x), ELEMENTWISE_OUTPUTS, f"x{scale}")


def test_edge_values_are_executorchs_bits(program, method):
    """XNNPACK flushes denormals (inputs read as zero, results flushed), its rsqrt of 0 is NaN, its exp of NaN is
    not NaN, and so on: the same bits, NaNs included."""
    (x,) = elementwise_inputs(6, 1.0, rows=4, cols=len(EDGE_VALUES))
    x[2] = torch.tensor(EDGE_VALUES) * 0.999
    x[3] = torch.tensor(EDGE_VALUES) * -1.001
    assert torch.isnan(x).any() and torch.isinf(x).any() and ((x != 0) & (x.abs() < 2.0**-126)).any()
    _assert_bits(method.execute([x]), run_reference(program, [x]), ELEMENTWISE_OUTPUTS, "edge values")


def test_rows_of_every_length_are_executorchs_bits(program, method):
    """Softmax sums in XNNPACK's order: blocks of 4 vectors, then vectors, then the masked rest, of either
    width (lengths around every boundary up to the program's bound)."""
    lengths = sorted({2, 3, *range(5, 70), 95, 96, 97, 127, 128, 129, 255, 256, 257, 1000, ELEMENTWISE_MAX[1]})
    for cols in lengths:
        x = elementwise_inputs(cols, 6.0, rows=2, cols=cols, edges=False)
        _assert_bits(method.execute(x), run_reference(program, x), ELEMENTWISE_OUTPUTS, f"{cols} columns")


def _nan(bits: int) -> float:
    return torch.tensor([bits], dtype=torch.int64).to(torch.int32).view(torch.float32).item()


def test_which_nan_a_softmax_row_ends_with_is_executorchs(program, method):
    """A row holding an infinity and a NaN, or two NaNs, meets two NaNs in one add or multiply, and x86 returns the
    first operand's: each must run in the operand order of ExecuTorch's build (native/vsoftmax.c). NaNs of
    distinct payloads at lane pairs within a vector, across vectors, halves and blocks, in rows of every loop's
    length."""
    quiet, negative = _nan(0x7FC12000), _nan(0xFFC34000)  # payloads whose exponent bits are zero after << 23
    kinds = ((math.inf, quiet), (quiet, negative), (negative, math.inf), (quiet, math.inf))
    seen = set()
    for cols in (7, 8, 9, 15, 16, 17, 24, 31, 32, 33, 40, 47, 48, 63, 64, 65, 72, 80, 100, 128, 129, 203):
        rows = []
        for first in (0, 1, 3):
            for gap in (1, 2, 4, 8, 16, 24, 32, 48, 64, cols - 1 - first):
                if 0 < gap and first + gap < cols:
                    for a, b in kinds:
                        row = torch.randn(cols, generator=torch.Generator().manual_seed(len(rows)))
                        row[first], row[first + gap] = a, b
                        rows.append(row)
        x = torch.stack(rows)
        for chunk in x.split(ELEMENTWISE_MAX[0]):
            expected = run_reference(program, [chunk])
            seen.update(_bits(expected[ELEMENTWISE_OUTPUTS.index("softmax")]).unique().tolist())
            _assert_bits(method.execute([chunk]), expected, ELEMENTWISE_OUTPUTS, f"NaNs in {cols} columns")
    # the premise: ExecuTorch's rows end with each of the three NaNs, so the order decided something
    assert {0x7FC12000, 0xFFC34000 - (1 << 32), 0xFFC00000 - (1 << 32)} <= seen, sorted(hex(b) for b in seen)


def test_threads_split_the_work_and_change_no_bit(program):
    """Elementwise nodes split in chunks, softmax by rows: the same bits at 1 and 2 threads."""
    x = elementwise_inputs(7, 3.0, rows=ELEMENTWISE_MAX[0], cols=ELEMENTWISE_MAX[1])
    expected = run_reference(program, x)
    for threads in (1, 2):
        method = _method(program, num_threads=threads)
        assert method.num_threads == threads, method.num_threads_reason  # the premise
        if native.float_family() is not None:
            assert "vunary(" in method.delegate_handles[0].source
        _assert_bits(method.execute(x), expected, ELEMENTWISE_OUTPUTS, f"{threads} threads")


def test_elu_from_a_hand_built_blob_is_executorchs_bits(method, tmp_path):
    """The partitioner leaves ELU out (ExecuTorch's EluConfig is off), but the runtime takes the node."""
    linear = export_model("et_toy_linear").pte
    pte = splice(linear, with_header(unary_graph(fb.XNodeUnion.XNNELU, elu_alpha=0.7)), tmp_path / "elu.pte")
    assert [n.kind for g in graphs(pte) for n in g.nodes] == ["XNNELU"]
    elu = _method(pte)
    assert _routes(elu) == [f"XNNPACK's {isa.cpu().float_kernels} float kernel (native)"], _routes(elu)
    edges = torch.tensor(EDGE_VALUES + (-1.0, -2.5, -0.125, -20.0, -1e-3))
    for seed in range(40):
        x = torch.randn(9, generator=torch.Generator().manual_seed(seed)) * (1 + seed % 7)
        if seed < edges.numel() // 9 + 1:
            chunk = edges[seed * 9:(seed + 1) * 9]
            x[: chunk.numel()] = chunk
        x = x.view(3, 3)
        _assert_bits(elu.execute([x]), run_reference(pte, [x]), ["elu"], f"seed {seed}")


def test_turned_off_pytorch_computes_them(program):
    """native=False: PyTorch's functions, which round otherwise (within float32 rounding)."""
    plain = pterun.Runtime.get().load_program(
        program, backend_options={"XnnpackBackend": {"native": False}}).load_method("forward")
    assert not any("native" in r for r in _routes(plain)), _routes(plain)
    assert "vunary(" not in plain.delegate_handles[0].source
    assert "native kernels turned off" in plain.delegate_handles[0].cpu
    x = elementwise_inputs(8, 2.0, edges=False)
    for a, e, name in zip(plain.execute(x), run_reference(program, x), ELEMENTWISE_OUTPUTS):
        finite = torch.isfinite(e)
        torch.testing.assert_close(a[finite], e[finite], rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.skipif(not X86, reason="the families are x86-64 ones")
def test_the_two_families_compute_differently():
    """Where both families run (an AVX-512 CPU runs the AVX2 one too), their sigmoid, rsqrt and sqrt differ
    somewhere, and the kernels XNNPACK writes once for both widths do not: so the emulated AVX2 run proves
    something of its own."""
    if native.float_family() != "avx512f":
        pytest.skip("needs a CPU running both families (AVX-512F)")
    from pterun.native import _kernels

    x = torch.randn(1 << 14, generator=torch.Generator().manual_seed(9)) * 8
    x[:1024] = torch.rand(1024, generator=torch.Generator().manual_seed(10)) * 1e3

    def run(kind: str, family: str) -> torch.Tensor:
        source = x.abs() if kind in ("XNNReciprocalSquareRoot", "XNNSquareRoot", "XNNLog") else x
        out = torch.empty_like(x)
        _kernels.vunary(native.VOPS[kind], native.VFAMILIES[family], source.data_ptr(), out.data_ptr(), x.numel(),
                        0.0, 1)
        return out

    for kind in native.VOPS:
        if kind == "XNNELU":
            continue
        same = torch.equal(_bits(run(kind, "avx512f")), _bits(run(kind, "avx2")))
        assert same == (kind not in ("XNNSigmoid", "XNNReciprocalSquareRoot", "XNNSquareRoot")), kind


def test_a_bad_kernel_call_is_a_typed_error_not_a_crash():
    if native.float_family() is None:
        pytest.skip("the native float kernels do not run here")
    from pterun.native import _kernels

    x = torch.ones(4)
    for op, family in ((99, 0), (0, 7), (-1, 0)):
        with pytest.raises(ValueError, match="unknown or does not run"):
            _kernels.vunary(op, family, x.data_ptr(), x.data_ptr(), 4, 0.0, 1)
    with pytest.raises(ValueError, match="softmax"):
        _kernels.softmax(5, x.data_ptr(), x.data_ptr(), 1, 4, 1)
    assert torch.equal(x, torch.ones(4)) and not math.isnan(float(x.sum()))
