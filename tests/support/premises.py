"""What a test asserts of a program it exported before it tests anything: that the exporter made what the
test is about, so a change in the exporter cannot turn it into a test of something else."""

from __future__ import annotations

from pathlib import Path

from pterun.format import ProgramFile, TensorSpec
from tests.support.exporting import Exported, export_program


def method_plan(exported: Exported, method: str = "forward"):
    return ProgramFile(exported.pte).plan(method)


def tensor_spec(plan, index: int) -> TensorSpec:
    value = plan.values[index]
    assert isinstance(value, TensorSpec), f"value {index} is {value!r}, not a tensor"
    return value


def assert_calls(pte: Path, expected: set[str], *, what: str = "") -> None:
    """The forward method calls every operator in ``expected`` ("namespace::name.overload")."""
    names = {f"{op}.{overload}" for op, overload in ProgramFile(pte).plan("forward").operators}
    missing = expected - names
    assert not missing, f"{what}the program lacks {sorted(missing)}; it has {sorted(names)}"


def export_calling(key: str, build, expected: set[str]) -> Exported:
    """``export_program(key, build)``, whose forward method must call every operator in ``expected``."""
    exported = export_program(key, build)
    assert_calls(exported.pte, expected, what=f"{key}: ")
    return exported
