"""BundledFile: a bundled program (.bpte), the .pte it holds and the test cases of its methods.

A bundled program is a flatbuffer of its own (identifier ``BP08``) whose ``program`` vector is a whole
.pte file and whose test suites give, per method, inputs and the outputs those inputs should produce.
The whole buffer is verified when the file is opened, and every test case is read then, into plain
values: a :class:`BundledTensor` (dtype code, sizes, dim order, a view of its bytes), an ``int``, a
``bool`` or a ``float``. A tensor whose bytes are fewer than its sizes need, or whose dim order is not a
permutation of its dimensions, makes the file ``InvalidProgram`` here, naming the value. A value of a
kind this reader does not know (a newer writer's) is kept as :class:`UnknownValue`; running a test case
that holds one is ``NotSupported``, as in ExecuTorch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pterun.enums import ELEMENT_SIZE
from pterun.errors import InvalidProgram, NotSupported, PteError
from pterun.flatbuf.tables import union_member, vector_span
from pterun.flatbuf.verify import verify_buffer
from pterun.format._generated import bundled_program_generated as fb
from pterun.format._generated import bundled_program_layout
from pterun.format.header import HEADER_OFFSET, IDENTIFIER_OFFSET, PROGRAM_IDENTIFIER
from pterun.format.program import _READ_ERRORS
from pterun.format.source import FileBytes, Source, read_source

BUNDLED_IDENTIFIER = bundled_program_layout.IDENT.encode()


@dataclass(frozen=True, slots=True)
class BundledTensor:
    scalar_type: int  # ExecuTorch's ScalarType code
    sizes: tuple[int, ...]
    dim_order: tuple[int, ...]
    data: memoryview  # exactly the tensor's bytes, a view of the file


@dataclass(frozen=True, slots=True)
class UnknownValue:
    type_code: int  # the union's type byte


Value = BundledTensor | int | bool | float | UnknownValue

_KIND = {fb.ValueUnion.Int: "Int", fb.ValueUnion.Bool: "Bool", fb.ValueUnion.Double: "Double",
         fb.ValueUnion.Tensor: "Tensor"}


def kind_of(value: Value) -> str:
    """A value's kind as the schema names it (``Tensor``, ``Int``, ``Bool``, ``Double``)."""
    if isinstance(value, BundledTensor):
        return "Tensor"
    if isinstance(value, UnknownValue):
        return f"value type {value.type_code}"
    return {bool: "Bool", int: "Int", float: "Double"}[type(value)]


@dataclass(frozen=True, slots=True)
class TestCase:
    inputs: tuple[Value, ...]
    expected_outputs: tuple[Value, ...]


@dataclass(frozen=True, slots=True)
class TestSuite:
    method_name: str
    test_cases: tuple[TestCase, ...]


class BundledFile:
    """A verified bundled program: ``program`` (the .pte's bytes, a view) and ``suites`` by method name."""

    def __init__(self, source: Source) -> None:
        self.file: FileBytes = read_source(source, what="bundled program")
        data = self.file.data
        _check_identifier(data, self.file.name)
        verify_buffer(data, bundled_program_layout)
        try:
            root = fb.BundledProgram.GetRootAs(data, 0)
            self.version: int = root.Version()
            start, length = vector_span(root, 8)
            if length == 0:
                raise InvalidProgram(f"{self.file.name}: the bundled program holds no program")
            self.program: memoryview = data[start : start + length]
            suites: dict[str, TestSuite] = {}
            for i in range(root.MethodTestSuitesLength()):
                suite = _suite(root.MethodTestSuites(i), i)
                if suite.method_name in suites:
                    raise InvalidProgram(f"test suite {i}: method {suite.method_name!r} has a test suite already")
                suites[suite.method_name] = suite
            self.suites = suites
        except PteError:
            raise
        except _READ_ERRORS as exc:
            raise InvalidProgram(f"{self.file.name}: corrupt bundled program ({type(exc).__name__}: {exc})") from None

    @property
    def method_names(self) -> tuple[str, ...]:
        """Methods with a test suite, in the file's order."""
        return tuple(self.suites)


def _check_identifier(data: memoryview, name: str) -> None:
    if len(data) < HEADER_OFFSET:
        raise InvalidProgram(f"{name} is {len(data)} bytes; a bundled program has at least {HEADER_OFFSET}")
    identifier = bytes(data[IDENTIFIER_OFFSET:HEADER_OFFSET])
    if identifier == BUNDLED_IDENTIFIER:
        return
    if identifier == PROGRAM_IDENTIFIER:
        raise NotSupported(f"{name} is a program (.pte, identifier {identifier!r}), not a bundled program (.bpte)")
    # ExecuTorch refuses a buffer without the identifier as NotSupported ("should be a bundled program").
    raise NotSupported(f"{name} is not a bundled program: its file identifier is {identifier!r}; "
                       f"expected {BUNDLED_IDENTIFIER!r}")


def _suite(table, index: int) -> TestSuite:
    raw = table.MethodName()
    if raw is None:
        raise InvalidProgram(f"test suite {index} has no method name")
    try:
        name = raw.decode()
    except UnicodeDecodeError:
        raise InvalidProgram(f"test suite {index}: its method name {bytes(raw)!r} is not UTF-8") from None
    cases = []
    for c in range(table.TestCasesLength()):
        case = table.TestCases(c)
        where = f"method {name!r}, test case {c}"
        inputs = tuple(_value(case.Inputs(j), f"{where}, input {j}") for j in range(case.InputsLength()))
        outputs = tuple(_value(case.ExpectedOutputs(j), f"{where}, expected output {j}")
                        for j in range(case.ExpectedOutputsLength()))
        cases.append(TestCase(inputs, outputs))
    return TestSuite(name, tuple(cases))


def _value(table, where: str) -> Value:
    kind = table.ValType()
    if kind not in _KIND:
        return UnknownValue(kind)
    member = table.Val()
    if member is None:
        raise InvalidProgram(f"{where}: its {_KIND[kind]} value is absent")
    if kind == fb.ValueUnion.Int:
        return union_member(member, fb.Int).IntVal()
    if kind == fb.ValueUnion.Bool:
        return union_member(member, fb.Bool).BoolVal()
    if kind == fb.ValueUnion.Double:
        return union_member(member, fb.Double).DoubleVal()
    return _tensor(union_member(member, fb.Tensor), where)


def _tensor(t, where: str) -> BundledTensor:
    sizes = tuple(int(s) for s in t.SizesAsNumpy()) if t.SizesLength() else ()
    dim_order = tuple(int(d) for d in t.DimOrderAsNumpy()) if t.DimOrderLength() else ()
    if any(s < 0 for s in sizes):
        raise InvalidProgram(f"{where}: sizes {list(sizes)} have a negative size")
    if sorted(dim_order) != list(range(len(sizes))):
        raise InvalidProgram(f"{where}: dim order {list(dim_order)} is not a permutation of its "
                             f"{len(sizes)} dimensions (sizes {list(sizes)})")
    scalar_type = t.ScalarType()
    if scalar_type not in ELEMENT_SIZE:
        raise InvalidProgram(f"{where}: scalar type {scalar_type} is not one a tensor can have")
    nbytes = ELEMENT_SIZE[scalar_type] * math.prod(sizes)
    start, length = vector_span(t, 8)
    if length < nbytes:
        raise InvalidProgram(f"{where}: sizes {list(sizes)} need {nbytes} bytes; its data holds {length}")
    return BundledTensor(scalar_type, sizes, dim_order, t._tab.Bytes[start : start + nbytes] if nbytes else
                         memoryview(b""))
