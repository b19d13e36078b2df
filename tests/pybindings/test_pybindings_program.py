"""The program object of pterun.pybindings (``_load_program``): its methods by index, as ExecuTorch's
``ExecuTorchProgram`` lists them, and the pterun Program underneath (pybindings' tests live in this folder)."""

from __future__ import annotations

import pytest

from pterun import Program, pybindings
from pterun.cli.options import example_llm
from pterun.errors import ErrorCode, IndexOutOfRange


def test_methods_by_index_are_the_programs_in_its_order():
    path, _ = example_llm()
    program = pybindings._load_program(str(path))
    names = program.program.method_names
    assert len(names) > 1, "a program of one method: no premise"
    assert program.num_methods() == len(names)
    assert {program.get_method_name(i) for i in range(program.num_methods())} == names
    for bad in (-1, len(names)):
        with pytest.raises(IndexOutOfRange, match=f"method index {bad} is out of range") as info:
            program.get_method_name(bad)
        assert info.value.code == ErrorCode.InvalidArgument
    assert program.get_method_name(0) in names  # still answers


def test_the_module_and_the_program_say_which_pterun_program_they_run():
    path, _ = example_llm()
    module = pybindings._load_for_executorch(str(path))
    assert isinstance(module.program, Program) and module.program is module.program  # loaded once
    assert set(module.method_names()) == module.program.method_names
    assert isinstance(pybindings._load_program(str(path)).program, Program)
