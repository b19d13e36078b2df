"""BundledProgram: a .bpte's program loaded on pterun, its test cases run and checked as ExecuTorch does.

A test case runs in ExecuTorch's order (``BundledModule::execute`` then ``verify_method_outputs``): the
method is loaded (a name the program lacks is ``InvalidArgument``), its test suite found (none is
``InvalidArgument``), the index checked (``InvalidArgument``), the inputs set (a failure there is
``NotSupported``, as ExecuTorch reports every ``set_input`` failure of a bundled input), the method run,
then each output compared with the expected one (:mod:`pterun.bundled.compare`; a difference is
``NotFound``, ExecuTorch's code for it). Where ExecuTorch reads past what the file holds (fewer inputs or
expected outputs than the method has, a tensor's bytes) or aborts the process (strides that differ),
pterun raises a typed error instead.

Methods are loaded once and kept, as in ExecuTorch's ``BundledModule``; a failed case leaves them usable.
"""

from __future__ import annotations

import operator
import time
from dataclasses import dataclass, field

import torch

from pterun.bundled.compare import OutputCheck, compare
from pterun.core.dtype import storage_dtype
from pterun.core.layout import strides_for
from pterun.errors import (
    IndexOutOfRange,
    InvalidArgument,
    InvalidArgumentType,
    InvalidProgram,
    NotFound,
    NotSupported,
    PteError,
)
from pterun.executor import Method, Program
from pterun.format.bundled import BundledFile, BundledTensor, TestCase, UnknownValue, kind_of
from pterun.format.source import FileBytes, Source
from pterun.runtime import Runtime

DEFAULT_RTOL = 1e-5
DEFAULT_ATOL = 1e-8


def to_tensor(value: BundledTensor) -> torch.Tensor:
    """A bundled tensor as a torch tensor of its own (a copy of the file's bytes), laid out by its dim order."""
    dtype = storage_dtype(value.scalar_type)
    strides = strides_for(value.sizes, value.dim_order)
    if not value.data.nbytes:
        return torch.empty_strided(value.sizes, strides, dtype=dtype)
    flat = torch.frombuffer(bytearray(value.data), dtype=torch.uint8).view(dtype)
    return flat.as_strided(value.sizes, strides)


def to_input(value, where: str):
    if isinstance(value, BundledTensor):
        return to_tensor(value)
    if isinstance(value, UnknownValue):
        raise NotSupported(f"{where}: {kind_of(value)} is not a value pterun knows")
    return value


@dataclass(frozen=True)
class CaseResult:
    """One test case run: ``passed``, per output what was compared, or the error that stopped it."""

    method: str
    index: int
    passed: bool
    outputs: tuple[OutputCheck, ...] = ()
    error: PteError | None = None
    seconds: float = 0.0
    values: list = field(default_factory=list, repr=False)  # the method's outputs

    @property
    def max_abs_error(self) -> float | None:
        errors = [o.max_abs_error for o in self.outputs if o.max_abs_error is not None]
        return max(errors) if errors else None


class BundledProgram:
    """A bundled program (.bpte): its program, loaded on first use, and its methods' test cases.

    ``options`` are :meth:`Runtime.load_program`'s (``device``, ``fuse``, ...).
    """

    def __init__(self, source: Source | BundledFile, **options) -> None:
        self.file = source if isinstance(source, BundledFile) else BundledFile(source)
        self._options = options
        self._program: Program | None = None

    @property
    def program_bytes(self) -> FileBytes:
        """The .pte the bundle holds (a view of the bundle's bytes, which it keeps alive)."""
        return FileBytes(self.file.program, f"the program in {self.file.file.name}", self.file.file)

    @property
    def program(self) -> Program:
        if self._program is None:
            self._program = Runtime.get().load_program(self.program_bytes, **self._options)  # type: ignore[arg-type]
        return self._program

    @property
    def method_names(self) -> tuple[str, ...]:
        """The methods the bundle has test cases for, in the file's order."""
        return self.file.method_names

    def test_cases(self, method_name: str) -> tuple[TestCase, ...]:
        suite = self.file.suites.get(method_name)
        if suite is None:
            have = ", ".join(map(repr, self.file.suites)) or "none"
            raise InvalidArgument(f"the bundled program has no test cases for method {method_name!r}; "
                                  f"it has test cases for {have}")
        return suite.test_cases

    def test_case(self, method_name: str, index: int) -> TestCase:
        cases = self.test_cases(method_name)
        if not 0 <= index < len(cases):
            raise IndexOutOfRange(f"test case {index} of method {method_name!r} does not exist; "
                                  f"it has {len(cases)} (0..{len(cases) - 1})")
        return cases[index]

    def inputs(self, method_name: str, index: int) -> list:
        """Test case ``index``'s inputs: tensors (copies), ints, bools and floats."""
        case = self.test_case(method_name, index)
        return [to_input(v, f"method {method_name!r}, test case {index}, input {j}") for j, v in enumerate(case.inputs)]

    def run(self, method_name: str, index: int) -> list:
        """Runs test case ``index`` of ``method_name`` and returns the method's outputs (copies)."""
        return self._run(self.program.load_method(method_name), method_name, index)

    def _run(self, method: Method, method_name: str, index: int) -> list:
        where = f"method {method_name!r}, test case {index}"
        inputs = self.inputs(method_name, index)
        try:
            method.set_inputs(inputs)
        except PteError as exc:
            raise NotSupported(f"{where}: its inputs cannot be set: {exc.message} [{exc.code.name}]") from None
        method.run()
        return method.get_outputs()

    def check(self, method_name: str, index: int, rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL,
              ) -> CaseResult:
        """Runs test case ``index`` and compares every output; errors come back in the result, not raised."""
        start = time.perf_counter()
        try:
            outputs = self.run(method_name, index)
            checks = self._compare(method_name, index, outputs, rtol, atol)
        except PteError as exc:
            return CaseResult(method_name, index, False, error=exc, seconds=time.perf_counter() - start)
        return CaseResult(method_name, index, all(c.ok for c in checks), tuple(checks), None,
                          time.perf_counter() - start, outputs)

    def verify(self, method_name: str, index: int, rtol: float = DEFAULT_RTOL, atol: float = DEFAULT_ATOL) -> list:
        """Runs test case ``index``; returns the outputs, or raises ``NotFound`` naming the first output that
        differs from the expected one and its worst element."""
        outputs = self.run(method_name, index)
        for check in self._compare(method_name, index, outputs, rtol, atol):
            if not check.ok:
                raise NotFound(f"method {method_name!r}, test case {index}: output {check.index} does not match "
                               f"the expected output: {check.detail}")
        return outputs

    def _compare(self, method_name: str, index: int, outputs: list, rtol: float, atol: float) -> list[OutputCheck]:
        where = f"method {method_name!r}, test case {index}"
        expected = self.test_case(method_name, index).expected_outputs
        if not expected:
            raise NotSupported(f"{where} has no expected outputs to compare with")
        if len(expected) < len(outputs):
            raise InvalidProgram(f"{where} has {len(expected)} expected outputs; the method has {len(outputs)}")
        checks = []
        for i, actual in enumerate(outputs):
            value = expected[i]
            if not isinstance(value, BundledTensor):
                raise NotSupported(f"{where}, expected output {i} is {kind_of(value)}; only tensors are compared")
            checks.append(compare(i, to_tensor(value), value.scalar_type, actual, rtol, atol))
        return checks

    # -- ExecuTorch's BundledModule ------------------------------------------------

    def verify_result_with_bundled_expected_output(self, method_name: str, testset_idx: int, rtol: float = 1e-5,
                                                   atol: float = 1e-8) -> list:
        """Runs test case ``testset_idx`` of ``method_name`` and returns its outputs; raises ``NotFound`` when an
        output differs from the expected one (``|expected - actual| > atol + |rtol * actual|``)."""
        try:
            index = operator.index(testset_idx)
        except TypeError:
            index = -1
        if index < 0 or not isinstance(method_name, str):
            raise InvalidArgumentType(
                "verify_result_with_bundled_expected_output(): incompatible function arguments: method_name must "
                f"be a str and testset_idx an int >= 0; invoked with {method_name!r}, {testset_idx!r}")
        return self.verify(method_name, index, float(rtol), float(atol))
