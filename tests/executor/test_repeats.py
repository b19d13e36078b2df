"""Reads the exporter repeats (executor/load/repeats.py): made once, with the results of the steps as written."""

from __future__ import annotations

import pytest
import torch

import pterun
from pterun.executor.load.steps import KernelStep
from pterun.format import KernelCall, MoveCall
from tests.support.llm_programs import llama_args, llama_program


def _count(method, name: str) -> int:
    return sum(1 for s in method.steps if isinstance(s, KernelStep) and s.name == name)


def _in_file(method, operator: str) -> int:
    plan = method.plan
    return sum(1 for ins in plan.instructions if isinstance(ins, KernelCall)
               and plan.operators[ins.op_index][0] == operator)


@pytest.mark.parametrize("variant", ["dynamic", "xnnpack-8da4w"])
def test_the_position_and_the_rotary_tables_are_read_once_with_the_same_results(variant):
    """ExecuTorch's Llama reads its start position and views its rotary tables once per layer; each repeat
    becomes a move of the first read's result, and every call computes what the steps as written compute."""
    program = llama_program(variant)
    shared = pterun.Runtime.get().load_program(program.pte).load_method("forward")
    plain = pterun.Runtime.get().load_program(program.pte, fuse=False).load_method("forward")
    layers = llama_args()["n_layers"]
    # The premise: the file reads the position once per layer and more (the cache updates' and attention's).
    assert _in_file(plain, "aten::_local_scalar_dense") > layers
    assert _count(plain, "aten::_local_scalar_dense") == _in_file(plain, "aten::_local_scalar_dense")
    assert _count(shared, "aten::_local_scalar_dense") <= 2, "one read of each distinct position"
    moves = sum(1 for s in shared.steps if isinstance(s, MoveCall))
    assert moves >= 2 * layers and moves > sum(1 for s in plain.steps if isinstance(s, MoveCall))
    tokens = torch.tensor([[3, 17, 25, 9, 41, 7]])
    calls = [(tokens, torch.tensor([0]))] + [(tokens[:, i:i + 1] + 1, torch.tensor([6 + i])) for i in range(4)]
    for call in calls:
        assert torch.equal(shared.execute(list(call))[0], plain.execute(list(call))[0])
