"""ExecuTorch's WebGPU backend tests, with every program they lower run on pterun.

ExecuTorch 1.5.1 ships its WebGPU backend's tests in the wheel
(``executorch/backends/webgpu/test``): ``op_tests/`` declares about 380 cases
with their tolerances, ``ops/`` holds about 90 test files that export and lower
programs through the Vulkan partitioner. Upstream runs the programs in native
C++ drivers the wheel lacks, and the wheel's runtime has no Vulkan delegate, so
as shipped these tests only export. Here each program runs through the test
harness's own entry point (``Serialize.run_artifact``, stages/serialize.py)
with ``pterun.pybindings`` in place of ``portable_lib``:

- an op_tests case is exported as its generator exports it, and its outputs are
  judged against the generator's golden (float64 unless the case says otherwise)
  as upstream's C++ driver judges them (``within_tol``, exact for integers);
- an ops/ test runs as written, and every program it lowers runs on pterun with
  the lowering's example inputs, judged against the exported program run eagerly
  (as ``Tester.run_method_and_compare_outputs`` does, with its tolerances).

The Vulkan partitioner's RoPE pattern builders are memoized while the tests run:
upstream's ``@lru_cache`` sits outside ``@register_pattern_graph``, so the
registry holds the uncached function and every lowering re-exports the pattern
models (about a minute each on two cores).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import sys
import unittest
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from unittest import mock

import pytest
import torch
from torch.utils._pytree import tree_flatten

from pterun import pybindings

UPSTREAM = "executorch.backends.webgpu.test"
# What Tester.run_method_and_compare_outputs compares with when a test gives no tolerance.
HARNESS_ATOL = HARNESS_RTOL = 1e-3
# Operators whose result is a placeholder (the operator writes its effect into an argument).
PLACEHOLDER_RESULTS = {"llama.update_cache.default"}


@contextlib.contextmanager
def memoized_pattern_graphs() -> Iterator[None]:
    """The Vulkan partitioner's pattern graphs built once per process instead of at every lowering."""
    from executorch.backends.vulkan.patterns import pattern_registry

    with contextlib.ExitStack() as stack:
        for entry in pattern_registry.fusable_patterns.values():
            if entry.get_graphs_fn is not None:
                cached = functools.cache(entry.get_graphs_fn)
                stack.enter_context(mock.patch.object(entry, "get_graphs_fn", cached))
        yield


@contextlib.contextmanager
def serialize_on_pterun() -> Iterator[None]:
    """The harness's Serialize stage loading programs with pterun.pybindings instead of portable_lib."""
    from executorch.backends.test.harness.stages import serialize

    with mock.patch.object(serialize, "_load_for_executorch_from_buffer",
                           pybindings._load_for_executorch_from_buffer, create=True), \
            mock.patch.object(serialize, "Verification", pybindings.Verification, create=True):
        yield


def run_on_pterun(buffer: bytes, inputs) -> list:
    """The program's forward method on ``inputs``, through the harness's Serialize stage (on pterun)."""
    from executorch.backends.test.harness.stages.serialize import Serialize

    stage = Serialize()
    stage.buffer = bytes(buffer)
    with serialize_on_pterun():
        outputs = stage.run_artifact(copy.deepcopy(inputs))
    return list(outputs)


# -- judging outputs ------------------------------------------------------------------------------


def within_tol(actual: torch.Tensor, golden: torch.Tensor, atol: float, rtol: float, what: str) -> None:
    """Upstream's driver rule (driver_util.cpp): an element fails when it is off by more than ``atol``
    and by more than ``rtol`` of ``max(|golden|, 1e-6)``; a NaN never passes. Integers and bools: exact.
    Infinities must be the same infinities (upstream's rule lets inf - inf, a NaN, pass)."""
    assert isinstance(actual, torch.Tensor), f"{what}: expected a tensor, got {type(actual).__name__}"
    assert tuple(actual.shape) == tuple(golden.shape), (
        f"{what}: shape {list(actual.shape)}, expected {list(golden.shape)}"
    )
    if not golden.is_floating_point():
        mismatch = (actual.to(torch.int64) != golden.to(torch.int64)).nonzero()
        assert not len(mismatch), (
            f"{what}: {len(mismatch)} of {golden.numel()} values differ; first at {mismatch[0].tolist()}: "
            f"{actual[tuple(mismatch[0])].item()} != {golden[tuple(mismatch[0])].item()}"
        )
        return
    a, g = actual.double(), golden.double()
    nan = torch.isnan(a) | torch.isnan(g)
    assert not nan.any(), f"{what}: {int(nan.sum())} NaNs"
    inf = torch.isinf(g) | torch.isinf(a)
    assert torch.equal(a[inf], g[inf]), f"{what}: infinities differ"
    a, g = a[~inf], g[~inf]
    if not g.numel():
        return
    abs_err = (a - g).abs()
    rel_err = abs_err / g.abs().clamp_min(1e-6)
    bad = (abs_err > atol) & (rel_err > rtol)
    assert not bad.any(), (
        f"{what}: {int(bad.sum())} of {g.numel()} values out of tolerance (atol {atol:g}, rtol {rtol:g}); "
        f"max abs error {abs_err.max().item():.3g}, max rel error {rel_err.max().item():.3g}"
    )


def flat_outputs(value) -> list:
    if isinstance(value, torch.Tensor):
        return [value]
    leaves, _ = tree_flatten(value)
    return leaves


# -- op_tests: the declarative cases ---------------------------------------------------------------


@dataclass(frozen=True)
class OpCase:
    op: str
    suite: object
    case: object

    @property
    def id(self) -> str:
        return f"{self.op}/{self.case.name or 'case'}"


def op_cases() -> list[OpCase]:
    """Every case of every suite op_tests registers, verified or not, heavy or not."""
    from executorch.backends.webgpu.test.op_tests import cases  # noqa: F401 - fills the registry
    from executorch.backends.webgpu.test.op_tests.test_suite import op_test_registry

    return [OpCase(op, suite, case) for op, suite in op_test_registry.items() for case in suite.cases]


def golden_outputs(suite, case, module, inputs) -> list[torch.Tensor]:
    """The generator's golden (generate_op_tests.generate_case): the case's own function, or the module in
    float64, or (golden_dtype float32) the module as it is; float results as float32."""
    with torch.no_grad():
        if case.golden_fn is not None:
            golden = case.golden_fn(module, inputs)
        elif getattr(suite, "golden_dtype", "float64") == "float64":
            double = copy.deepcopy(module).double()
            golden = double(*[x.double() if x.is_floating_point() else x for x in inputs])
        else:
            golden = module(*inputs)
    return [g.to(torch.float32) if g.is_floating_point() else g for g in flat_outputs(golden)]


def run_op_case(op_case: OpCase) -> None:
    """Exports the case as the generator does, runs it on pterun and judges it with the case's tolerance."""
    from executorch.backends.webgpu.test.op_tests import generate_op_tests

    suite, case = op_case.suite, op_case.case
    with memoized_pattern_graphs():
        module, inputs, program = generate_op_tests.export_case(suite, case)
    delegated = generate_op_tests._has_vulkan_delegate(program)
    assert delegated or not case.required, f"{op_case.id}: the program has no VulkanBackend delegate"
    golden = golden_outputs(suite, case, module, inputs)
    actual = run_on_pterun(program.buffer, inputs)
    atol = case.atol if case.atol is not None else suite.atol
    rtol = case.rtol if case.rtol is not None else suite.rtol
    assert len(actual) == len(golden), f"{op_case.id}: {len(actual)} outputs, expected {len(golden)}"
    for k, (a, g) in enumerate(zip(actual, golden, strict=True)):
        within_tol(a, g, atol, rtol, f"{op_case.id} output {k}")


# -- ops/: the test files, with every lowering run on pterun -----------------------------------------


@dataclass
class Lowered:
    """One program a test lowered, and how it fared on pterun (``error`` None: it matched)."""

    what: str
    error: str | None = None


@dataclass
class Lowerings:
    """The programs lowered while a test runs, each run on pterun as soon as the test serializes it."""

    programs: list[Lowered] = field(default_factory=list)

    def check(self, program, source, lowered) -> None:
        what = f"program {len(self.programs) + 1} ({_describe(source)})"
        record = Lowered(what)
        self.programs.append(record)
        try:
            args, kwargs = source.example_inputs or ((), {})
            assert not kwargs, "keyword inputs"
            actual = run_on_pterun(program.buffer, args)
            expected = _eager_outputs(source, lowered.graph_signature, args)
            assert len(actual) == len(expected), f"{len(actual)} outputs, expected {len(expected)}"
            for k, (a, e) in enumerate(zip(actual, expected, strict=True)):
                if e is not None:
                    within_tol(a, e.detach(), HARNESS_ATOL, HARNESS_RTOL, f"output {k}")
        except Exception as exc:  # noqa: BLE001 - every failure is reported with its program, after the test
            record.error = f"{type(exc).__name__}: {exc}".splitlines()[0][:400]

    @property
    def failures(self) -> list[Lowered]:
        return [p for p in self.programs if p.error is not None]


def _eager_outputs(ep, signature, args) -> list:
    """What the program returns, computed eagerly by the exported program ``ep``: the inputs it updates in
    place (after the call, where the lowered program's ``signature`` returns them), and its outputs."""
    from torch.export.graph_signature import InputKind, OutputKind

    inputs = copy.deepcopy(args)
    computed = flat_outputs(copy.deepcopy(ep.module())(*inputs))
    # llama.update_cache returns a placeholder its kernels leave unwritten (eagerly: uninitialized memory):
    # nothing to compare.
    made_by = [str(getattr(node, "target", "")) for node in tree_flatten(ep.graph.output_node().args)[0]]
    outputs = iter(None if target in PLACEHOLDER_RESULTS else value for value, target in zip(computed, made_by))
    flat = tree_flatten(inputs)[0]
    names = [s.arg.name for s in signature.input_specs if s.kind == InputKind.USER_INPUT]
    expected = []
    for spec in signature.output_specs:
        if spec.kind == OutputKind.USER_INPUT_MUTATION:
            expected.append(flat[names.index(spec.target)])
        elif spec.kind == OutputKind.USER_OUTPUT:
            expected.append(next(outputs))
    return expected


def _describe(ep) -> str:
    shapes = [list(t.shape) for t in tree_flatten(ep.example_inputs)[0] if isinstance(t, torch.Tensor)]
    return f"inputs {shapes}"


@contextlib.contextmanager
def lowering_on_pterun() -> Iterator[Lowerings]:
    """While active, every ``to_edge_transform_and_lower(ep, ...).to_executorch()`` of an upstream test module
    also runs the program on pterun against ``ep`` run eagerly; the outcomes collect in the Lowerings."""
    import executorch.exir as exir
    from executorch.exir.program._program import EdgeProgramManager

    seen = Lowerings()
    lower = exir.to_edge_transform_and_lower
    serialize = EdgeProgramManager.to_executorch
    sources: dict[int, object] = {}

    @functools.wraps(lower)
    def lowering(programs, *args, **kwargs):
        edge = lower(programs, *args, **kwargs)
        if isinstance(programs, torch.export.ExportedProgram):
            sources[id(edge)] = (edge, programs)
        return edge

    @functools.wraps(serialize)
    def to_executorch(self, *args, **kwargs):
        program = serialize(self, *args, **kwargs)
        kept = sources.get(id(self))
        if kept is not None and kept[0] is self:
            seen.check(program, kept[1], self.exported_program())
        return program

    with contextlib.ExitStack() as stack:
        for module in _upstream_modules():
            if getattr(module, "to_edge_transform_and_lower", None) is lower:
                stack.enter_context(mock.patch.object(module, "to_edge_transform_and_lower", lowering))
        stack.enter_context(mock.patch.object(EdgeProgramManager, "to_executorch", to_executorch))
        stack.enter_context(memoized_pattern_graphs())
        yield seen


def _upstream_modules() -> list:
    return [m for name, m in list(sys.modules.items()) if name.startswith(UPSTREAM + ".") and m is not None]


def on_pterun(test: Callable, known: str | None = None) -> Callable:
    """An upstream test method that also runs every program it lowers on pterun: it fails when one of them
    fails there or does not match, and skips when it lowers none (then it tests nothing of pterun).

    ``known``: why the test itself fails (known.py). Its own failures, subtests' included, then make it an
    expected failure with that reason, while the programs it lowers are still judged; a known test that no
    longer fails is a failure (strictly: the list must be mended)."""

    @functools.wraps(test)
    def wrapped(self) -> None:
        own: list[BaseException] = []
        with lowering_on_pterun() as seen:
            if known is None:
                test(self)
            else:
                with _collecting_subtests(self, own):
                    try:
                        test(self)
                    except unittest.SkipTest:
                        raise
                    except Exception as exc:  # noqa: BLE001 - the failure known.py expects, reported below
                        own.append(exc)
        failures = seen.failures
        if failures:
            raise AssertionError(
                f"{len(failures)} of {len(seen.programs)} lowered programs failed on pterun:\n"
                + "\n".join(f"  {p.what}: {p.error}" for p in failures)
            )
        if known is not None:
            if own:
                pytest.xfail(f"{known} ({type(own[0]).__name__}: {str(own[0]).splitlines()[0][:200]})")
            pytest.fail(f"known.py expects this test to fail ({known}), and it passes: take it off the list")
        if not seen.programs:
            self.skipTest("lowers no program: nothing of it runs on pterun")

    return wrapped


@contextlib.contextmanager
def _collecting_subtests(case: unittest.TestCase, failures: list) -> Iterator[None]:
    """``case.subTest`` keeping its failures in ``failures`` instead of reporting them."""

    @contextlib.contextmanager
    def subtest(*args, **kwargs):
        try:
            yield
        except unittest.SkipTest:
            raise
        except Exception as exc:  # noqa: BLE001 - collected for on_pterun
            failures.append(exc)

    with mock.patch.object(case, "subTest", subtest):
        yield
