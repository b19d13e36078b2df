"""compile=True: methods rewritten as pure functions and compiled by TorchInductor still match ExecuTorch."""

from __future__ import annotations

import pytest
import torch

import pterun
from tests.support.compare import assert_matches
from tests.support.differential import export_model, flat
from tests.support.models import build
from tests.support.oracle import reference_module, run_reference


@pytest.mark.parametrize("name", ["llama", "mobilenet_v2", "et_llama_kv"])
def test_compiled_method_matches_executorch(name):
    exported = export_model(name, "portable")
    method = pterun.Runtime.get().load_program(exported.pte, compile=True).load_method("forward")
    assert method.compile_status == "compiled", method.compile_status
    make_inputs = build(name).make_inputs
    reference = reference_module(exported.pte)
    for seed in (0, 1, 2):
        args = flat(make_inputs(seed))
        expected = list(reference.run_method("forward", [a.clone() if isinstance(a, torch.Tensor) else a
                                                         for a in args]))
        assert_matches(method.execute(args), expected, rtol=1e-4, what=f"{name} call {seed}")


class Branchy(torch.nn.Module):
    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda x: x * 2, lambda x: x - 1, (x,))


def test_what_cannot_be_compiled_runs_as_usual_and_says_why():
    from tests.support.exporting import ExportSpec, export_program

    exported = export_program("compile-cond", lambda: ExportSpec(Branchy(), (torch.randn(3),)))
    plan = pterun.format.ProgramFile(exported.pte).plan("forward")
    assert any(isinstance(i, pterun.format.JumpFalseCall) for i in plan.instructions), "premise: control flow"
    method = pterun.Runtime.get().load_program(exported.pte, compile=True).load_method("forward")
    assert method.compile_status.startswith("not compiled: ") and "control flow" in method.compile_status
    for x in (torch.ones(3), -torch.ones(3)):
        assert_matches(method.execute([x]), run_reference(exported.pte, [x]))


@pytest.mark.parametrize("name", sorted(__import__("tests.support.models", fromlist=["MODELS"]).MODELS))
def test_functional_form_computes_what_the_method_computes(name):
    """The function handed to torch.compile, run as plain Python: the same outputs as the method.

    Every model compiles; one that cannot would be listed here by name with its reason, never skipped."""
    exported = export_model(name, "portable")
    plain = pterun.Runtime.get().load_program(exported.pte).load_method("forward")
    functional = pterun.Runtime.get().load_program(exported.pte, compile=True).load_method("forward")
    assert functional.compile_status == "compiled", f"{name}: {functional.compile_status}"
    make_inputs = build(name).make_inputs
    stateful = any(isinstance(v, pterun.format.TensorSpec) and v.memory_id is not None and v.fqn
                   for v in functional._plan.values)
    for seed in (0,) if stateful else (0, 1):
        args = flat(make_inputs(seed))
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        with torch.inference_mode():
            outputs = list(functional._functional(*tensors))
        assert_matches(outputs, plain.execute(args), rtol=1e-5, what=f"{name} seed {seed}")
