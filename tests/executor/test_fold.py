"""Copies the exporter made become views at load (executor/load/fold.py), on an exported transformer."""

from __future__ import annotations

from pterun.executor.load.steps import KernelStep
from pterun.format import KernelCall
from tests.support.differential import check, export_model, load
from tests.support.models import build


def test_weight_transposes_are_folded_though_planned_views_reuse_their_bytes():
    exported = export_model("llama", "portable")
    program = load(exported)
    method = program.load_method("forward")
    plan = method.plan
    constant = {i for i, v in enumerate(plan.values) if getattr(v, "is_constant", False)}
    transposes = [n for n, ins in enumerate(plan.instructions) if isinstance(ins, KernelCall)
                  and plan.operators[ins.op_index][0] == "aten::permute_copy" and ins.args[0] in constant]
    # The premise: the exporter copies weights. Views it planned elsewhere reuse those bytes at other times.
    assert transposes
    left = [n for n in transposes if isinstance(method.steps[n], KernelStep)]
    assert left == []
    make_inputs = build("llama").make_inputs
    for seed in (0, 1):
        check(exported, make_inputs(seed), program=program)
