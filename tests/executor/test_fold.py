"""Copies the exporter made become views at load (executor/load/fold.py), on an exported transformer."""

from __future__ import annotations

import torch

from pterun.executor.load.steps import KernelStep
from pterun.format import KernelCall
from tests.support.compare import assert_matches
from tests.support.differential import check, export_model, load
from tests.support.models import build
from tests.support.oracle import reference_module


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



def test_weight_transposes_are_folded_where_a_dim_order_copy_rewrites_their_bytes_before_a_view_reads_them():
    """bench/llm_gpu.py's bfloat16 static-cache decoder (transformers' export, as optimum-executorch writes
    it): the plan gives two weight transposes bytes that a later clone (a dim-order copy: the keys repeated
    for the query heads) rewrites whole before a view of that clone reads them. A dim-order copy declares
    that it covers its out (Binding.covers), so those transposes fold too; they were copied every call."""
    import pterun
    from tests.support.llm_programs import bench_decoder_program

    pte = bench_decoder_program()
    plan = pterun.format.ProgramFile(pte).plan("forward")
    constant = {i for i, v in enumerate(plan.values) if getattr(v, "is_constant", False)}
    transposes = [n for n, ins in enumerate(plan.instructions) if isinstance(ins, KernelCall)
                  and plan.operators[ins.op_index][0] == "aten::permute_copy" and ins.args[0] in constant]
    clones = [n for n, ins in enumerate(plan.instructions) if isinstance(ins, KernelCall)
              and plan.operators[ins.op_index][0] == "dim_order_ops::_clone_dim_order"]
    assert transposes and clones, "premise: the exporter transposes weights and clones the repeated keys"
    program = pterun.Runtime.get().load_program(pte)
    method = program.load_method("forward")
    assert [n for n in transposes if isinstance(method.steps[n], KernelStep)] == []
    # Folded, the calls still give ExecuTorch's bits, the prompt and the steps after it (unfused: the fused
    # chains round differently, docs/precision.md).
    unfused = pterun.Runtime.get().load_program(pte, fuse=False).load_method("forward")
    assert [n for n in transposes if isinstance(unfused.steps[n], KernelStep)] == []
    reference = reference_module(pte)
    for length, start in ((5, 0), (1, 5), (1, 6)):
        tokens, positions = torch.randint(3, 500, (1, length)), torch.arange(start, start + length)
        expected = reference.run_method("forward", [tokens.clone(), positions.clone()])[0]
        assert torch.equal(unfused.execute([tokens, positions])[0], expected), f"{length} tokens at {start}"


def test_copies_delegates_read_become_views_laid_out_as_planned():
    """A transformers decoder quantized as optimum-executorch quantizes it (8da4w: its linear layers, attention's
    matrix products and softmax in XNNPACK delegates): the exporter repeats a tensor to its own shape
    (``expand_copy``) for a delegate, which reads its arguments as the plan lays them out. The copy becomes a view
    where the view has that layout (``Rewriter.keeps_layout``); the calls still give ExecuTorch's values (to the
    ulp, as tests/llm/test_llm_programs.py holds these programs)."""
    import pterun
    from pterun.executor.load.steps import DelegateStep
    from tests.support.llm_programs import transformers_program

    pte = transformers_program("qwen2-8da4w").pte
    method = pterun.Runtime.get().load_program(pte).load_method("forward")
    plan, steps = method.plan, method.steps
    readers: dict[int, list[int]] = {}
    for n, ins in enumerate(plan.instructions):
        for a in getattr(ins, "args", ()):
            readers.setdefault(a, []).append(n)
    laid_out = [n for n, s in enumerate(steps) if isinstance(s, KernelStep) and s.binding.result is not None
                and getattr(s.binding.fn, "__name__", "").endswith("_laid_out")]
    assert laid_out, "a copy a delegate reads became a view"
    for n in laid_out:
        # The premise: the view's readers rely on the planned layout (a delegate, or et_view handing it to one).
        later = [r for r in readers[steps[n].args[steps[n].binding.result]] if r > n]
        assert any(isinstance(steps[r], DelegateStep) or "et_view" in getattr(steps[r], "name", "") for r in later), n

    reference = reference_module(pte)
    for length, start in ((5, 0), (1, 5), (1, 6)):
        tokens, positions = torch.randint(3, 500, (1, length)), torch.arange(start, start + length)
        expected = reference.run_method("forward", [tokens.clone(), positions.clone()])[0]
        assert_matches(method.execute([tokens, positions])[0], expected, what=f"{length} tokens at {start}")
