"""Runs one spec three ways (eager PyTorch, ExecuTorch's runtime, pterun) and says who disagrees.

pterun must give ExecuTorch's results. When the two differ, eager PyTorch is the
third opinion: pterun agreeing with PyTorch against ExecuTorch is ExecuTorch's own
bug (recorded, not counted against pterun); anything else is pterun's failure.
A program that fails to export is discarded (and counted by the caller).
"""

from __future__ import annotations

import hashlib
import time
import traceback
import warnings
from dataclasses import dataclass, field

import torch

from tests.fuzz.builder import eager, export_spec, make_inputs
from tests.fuzz.check import check
from tests.fuzz.ops import Invalid
from tests.fuzz.spec import Spec
from tests.support.compare import assert_matches
from tests.support.differential import assert_same_layouts
from tests.support.exporting import export_program

AGREE = "agree"
DISCARD = "discard"
EXECUTORCH = "executorch-only"  # ExecuTorch differs from PyTorch and pterun, or refuses the program
FAILURE = "failure"

# Looser than pterun vs ExecuTorch: eager PyTorch may decompose differently from the exported program.
EAGER_RTOL, EAGER_ULPS = 1e-4, 8


@dataclass
class Outcome:
    status: str
    kind: str = ""  # e.g. mismatch, error:InvalidArgument, export:RuntimeError
    detail: str = ""
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        """What the shrinker keeps constant: the same verdict of the same kind."""
        return f"{self.status}/{self.kind}"


def spec_key(spec: Spec, lowering: str) -> str:
    return f"fuzz-{lowering}-{hashlib.sha256(spec.dumps().encode()).hexdigest()[:16]}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"[:300]


def _clone(values) -> list:
    return [v.detach().clone() if isinstance(v, torch.Tensor) else v for v in values]


def _matches(actual, expected, **tolerance) -> str | None:
    try:
        assert_matches(actual, expected, **tolerance)
    except AssertionError as exc:
        return str(exc).splitlines()[0]
    return None


def run_calls(call, calls: list[list]) -> tuple[list[list], BaseException | None]:
    """Outputs of each call in order, stopping at the first that raises."""
    outputs = []
    for args in calls:
        try:
            outputs.append(_clone(call(_clone(args))))
        except Exception as exc:  # noqa: BLE001 - any failure is a verdict
            return outputs, exc
    return outputs, None


def run(spec: Spec, lowering: str, *, exporter=export_program) -> Outcome:
    start = time.perf_counter()
    outcome = _run(spec, lowering, exporter)
    outcome.seconds = time.perf_counter() - start
    return outcome


def _run(spec: Spec, lowering: str, exporter) -> Outcome:
    import pterun
    from tests.support.oracle import reference_module

    try:
        check(spec)
    except Invalid as exc:
        return Outcome(DISCARD, "invalid", str(exc))
    calls = [make_inputs(spec, k) for k in range(spec.calls)]
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        module = eager(spec)
        expected_eager, exc = run_calls(lambda args: list(module(*args)), calls)
        if exc is not None:
            return Outcome(DISCARD, f"eager:{type(exc).__name__}", _first_line(exc))
        try:
            exported = exporter(spec_key(spec, lowering), lambda: export_spec(spec, lowering))
        except Exception as exc:  # noqa: BLE001
            return Outcome(DISCARD, f"export:{type(exc).__name__}", _first_line(exc))

    reference, ref_exc = None, None
    try:
        reference = reference_module(exported.pte, exported.ptd)
    except Exception as exc:  # noqa: BLE001
        ref_exc = exc
    expected = []
    if reference is not None:
        expected, ref_exc = run_calls(lambda args: list(reference.run_method("forward", args)), calls)

    actual, our_exc = [], None
    try:
        program = pterun.Runtime.get().load_program(exported.pte, data_path=list(exported.ptd) or None)
        method = program.load_method("forward")
        actual, our_exc = run_calls(method.execute, calls)
    except Exception as exc:  # noqa: BLE001
        our_exc = exc

    def near_eager(outputs) -> bool:
        return all(
            _matches(a, e, rtol=EAGER_RTOL, ulps=EAGER_ULPS) is None for a, e in zip(outputs, expected_eager)
        )

    if our_exc is not None:
        if ref_exc is not None:
            return Outcome(
                EXECUTORCH,
                "both-refuse",
                f"executorch: {_first_line(ref_exc)}; pterun: {_first_line(our_exc)}",
            )
        kind = "error" if isinstance(our_exc, pterun.PteError) else "untyped-error"
        return Outcome(
            FAILURE, f"{kind}:{type(our_exc).__name__}", _first_line(our_exc), notes=[_where(our_exc)]
        )
    if ref_exc is not None:
        if near_eager(actual):
            return Outcome(EXECUTORCH, "executorch-refuses", _first_line(ref_exc))
        return Outcome(FAILURE, "wrong-where-executorch-refuses", _first_line(ref_exc))

    for k, (a, e) in enumerate(zip(actual, expected)):
        problem = _matches(a, e, what=f"call {k}")
        if problem is None:
            try:
                assert_same_layouts(a, e, what=f"call {k}")
            except AssertionError as exc:
                return Outcome(FAILURE, "layout", str(exc))
            continue
        # pterun within the usual tolerance of PyTorch where ExecuTorch is not, or within the looser one where
        # ExecuTorch is not either: ExecuTorch computes something else (or less precisely) than PyTorch.
        for tolerance in ({}, {"rtol": EAGER_RTOL, "ulps": EAGER_ULPS}):
            ours_ok = _matches(a, expected_eager[k], **tolerance) is None
            theirs_ok = _matches(e, expected_eager[k], **tolerance) is None
            if ours_ok and not theirs_ok:
                return Outcome(EXECUTORCH, "executorch-differs", problem)
        return Outcome(
            FAILURE,
            "mismatch",
            problem,
            notes=["executorch matches eager" if theirs_ok else "all three differ"],
        )
    notes = [] if near_eager(expected) else ["executorch and pterun agree but differ from eager"]
    functional = _functional_form(exported, calls, actual)
    if functional is not None:
        return functional
    return Outcome(AGREE, notes=notes)


def _functional_form(exported, calls: list[list], actual: list[list]) -> Outcome | None:
    """compile=True hands TorchInductor a functional form of the method; run as plain Python (no compiler,
    so it costs little) it must compute what the method computes, call after call."""
    import pterun

    try:
        program = pterun.Runtime.get().load_program(
            exported.pte, data_path=list(exported.ptd) or None, compile=True
        )
        method = program.load_method("forward")
    except Exception as exc:  # noqa: BLE001
        return Outcome(
            FAILURE, f"functional-load:{type(exc).__name__}", _first_line(exc), notes=[_where(exc)]
        )
    if method.compile_status != "compiled":
        return None

    def call(args):
        with torch.inference_mode():
            return list(method.functional(*[a for a in args if isinstance(a, torch.Tensor)]))

    outputs, exc = run_calls(call, calls)
    if exc is not None:
        return Outcome(
            FAILURE, f"functional-error:{type(exc).__name__}", _first_line(exc), notes=[_where(exc)]
        )
    for k, (f, a) in enumerate(zip(outputs, actual)):
        problem = _matches(f, a, what=f"call {k}")
        if problem is not None:
            return Outcome(FAILURE, "functional-mismatch", problem)
    return None


def _where(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    inside = [f for f in frames if "/pterun/" in f.filename]
    f = (inside or frames or [None])[-1]
    return f"{f.filename}:{f.lineno} in {f.name}" if f else ""
