"""MethodMeta and TensorInfo: ExecuTorch's methods with no peer test elsewhere, and pterun's own, which the
CLI, the LLM runner and Ray's reader use instead of the file's plan."""

from __future__ import annotations

import pytest
import torch

import pterun
from pterun.errors import ErrorCode, IndexOutOfRange
from tests.cli.programs import demo_delegated
from tests.executor import programs
from tests.support.exporting import ExportSpec, export_program


class _Accumulate(torch.nn.Module):
    """A mutable buffer, named in the program (emit_mutable_buffer_names): the method's one attribute."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("total", torch.zeros(2, 3))

    def forward(self, x):
        self.total.add_(x)
        return self.total * 1


def _meta(pte) -> pterun.MethodMeta:
    return pterun.Runtime.get().load_program(pte).metadata("forward")


def _accumulate():
    return export_program("method-meta-accumulate", lambda: ExportSpec(
        _Accumulate(), (torch.randn(2, 3),), config={"emit_mutable_buffer_names": True}))


def test_attributes_are_the_named_tensors():
    meta = _meta(_accumulate().pte)
    assert meta.num_attributes() == 1
    total = meta.attribute_tensor_meta(0)
    assert total.name() == "total" and list(total.sizes()) == [2, 3] and total.is_memory_planned()
    with pytest.raises(IndexOutOfRange, match="attribute 1 does not exist") as info:
        meta.attribute_tensor_meta(1)
    assert info.value.code == ErrorCode.InvalidArgument
    assert meta.attribute_tensor_meta(0) == total  # still answers


def test_instructions_and_backends():
    delegated = _meta(demo_delegated().pte)
    plain = _meta(programs.add_mul().pte)
    assert delegated.num_backends() >= 1, "no delegate in the program: no premise"
    assert delegated.uses_backend("BackendWithCompilerDemo") and not plain.uses_backend("BackendWithCompilerDemo")
    assert not delegated.uses_backend("XnnpackBackend")
    # add and mul: one kernel call each; the delegated one calls the delegate and then the portable mul.
    assert plain.num_instructions() == 2 and sorted(plain.operators()) == ["aten::add.out", "aten::mul.out"]
    assert delegated.num_instructions() == 2 and delegated.operators() == ["aten::mul.out"]


def test_dynamism_and_names_of_tensors():
    static, dynamic = _meta(programs.add_mul().pte), _meta(programs.dynamic_add_mul().pte)
    assert static.input_tensor_meta(0).dynamism() == "static"
    assert dynamic.input_tensor_meta(0).dynamism() == "bounded"
    assert list(dynamic.input_tensor_meta(0).sizes()) == [4, 3]  # the upper bound
    assert static.input_tensor_meta(0).name() is None


def test_an_input_baked_into_the_program_says_its_value():
    meta = _meta(programs.scaled().pte)
    assert meta.input_tag(1) == "Int", "the int input is not a value of its own: no premise"
    assert meta.input_value(1) == 5
    with pytest.raises(IndexOutOfRange, match="input 0 is a Tensor, not a single value"):
        meta.input_value(0)
    with pytest.raises(IndexOutOfRange, match="input 2 does not exist"):
        meta.input_value(2)


def test_every_tensor_and_the_memory_plan():
    meta = _meta(programs.add_mul().pte)
    tensors = meta.tensors()
    assert len(tensors) == 4  # x, y, x + y, x * y
    assert sum(meta.tensor_meta(v).nbytes() for v in tensors) == 4 * 2 * 3 * 4
    arenas = meta.memory_plan()
    assert arenas is meta.memory_plan()  # worked out once
    assert {t.value for a in arenas for t in a.tensors} <= set(tensors)
    assert all(a.size == meta.memory_planned_buffer_size(a.memory_id - 1) for a in arenas)
    with pytest.raises(IndexOutOfRange, match=f"value {len(tensors) + 100} does not exist"):
        meta.tensor_meta(len(tensors) + 100)
