"""Structure-aware mutations: indices retargeted at other things the file has.

An instruction argument, a method input or output, a list item, a memory id
or offset, a tensor's sizes, dim order or scalar type, a delegate index, a
compile spec, an XNNPACK blob's value ids and flags, each set to another value
of the file (a constant, another tensor, a list). Such a file passes the
verifier, so only the checks made at load stand between it and a kernel.
"""

from __future__ import annotations

import pytest
from hypothesis import strategies as st

from tests.executor.malformed.subjects import Mutation, Pools, Subject, fuzz, le
from tests.support.file_structure import Field

# Fields holding a value index, and what else each may be retargeted at.
VALUE_FIELDS = (
    "pte.KernelCall.args[]", "pte.DelegateCall.args[]", "pte.ExecutionPlan.inputs[]", "pte.ExecutionPlan.outputs[]",
    "pte.Chain.inputs[]", "pte.Chain.outputs[]", "pte.TensorList.items[]", "pte.OptionalTensorList.items[]",
    "pte.IntList.items[]", "pte.MoveCall.move_from", "pte.MoveCall.move_to", "pte.JumpFalseCall.cond_value_index",
    "pte.FreeCall.value_index",
)
SCALAR_TYPES = [0, 1, 2, 3, 4, 5, 6, 7, 11, 15, 22, 23, 24, 26, 27, 28, 44, 100]  # valid ones and a few that are not


def _retarget_value(f: Field, p: Pools):
    """What a field may be retargeted at: in range, and of a kind that makes the change mean something."""
    name = f.name
    if name in VALUE_FIELDS:
        return st.one_of(st.sampled_from(p.tensors), st.sampled_from(p.constants), st.sampled_from(p.lists),
                         st.sampled_from(p.scalars), st.integers(0, max(p.values - 1, 0)), st.just(-1))
    if name == "pte.KernelCall.op_index":
        return st.integers(0, max(p.operators - 1, 0))
    if name in ("pte.DelegateCall.delegate_index", "pte.BackendDelegateDataReference.index"):
        return st.integers(0, max(p.delegates, 1))
    if name == "pte.JumpFalseCall.destination_instruction":
        return st.integers(0, p.instructions)
    if name == "pte.AllocationDetails.memory_id":
        return st.integers(0, len(p.buffers))
    if name == "pte.AllocationDetails.memory_offset_low":
        return st.one_of(st.sampled_from(p.offsets), st.sampled_from(p.buffers),
                         st.integers(0, max(p.buffers)).map(lambda v: v & ~15))
    if name in ("pte.Tensor.sizes[]",):
        return st.one_of(st.sampled_from(p.sizes), st.integers(0, 9))
    if name == "pte.Tensor.dim_order[]":
        return st.integers(0, 5)
    if name == "pte.Tensor.scalar_type":
        return st.sampled_from(SCALAR_TYPES)
    if name == "pte.Tensor.data_buffer_idx":
        return st.integers(0, p.constant_buffers + 1)
    if name in ("pte.Tensor.shape_dynamism", "pte.BackendDelegateDataReference.location",
                "pte.ExtraTensorInfo.location", "pte.ExtraTensorInfo.device_type"):
        return st.integers(0, 3)
    if name == "pte.Int.int_val":
        return st.one_of(st.integers(-3, 9), st.sampled_from(p.sizes), st.sampled_from(p.offsets))
    if name.startswith("xnngraph.") and name.endswith(("_id", "id_out", "_ids[]")) and "external" not in name:
        return st.one_of(st.integers(0, max(p.xnn_values - 1, 0)), st.just(0xFFFFFFFF))
    if name == "xnngraph.XNNTensorValue.external_id":
        return st.one_of(st.integers(0, p.xnn_externs), st.just(0xFFFFFFFF))
    if name.endswith(".flags"):
        return st.integers(0, 3)
    if name == "xnngraph.XNNTensorValue.datatype":
        return st.integers(0, 15)
    if name.endswith(("dims[]", "num_dims", "perm[]", "axis", "new_shape[]", "offsets[]", "sizes[]")):
        return st.integers(0, 6)
    return st.integers(0, 16)


RETARGETED = (*VALUE_FIELDS, "pte.KernelCall.op_index", "pte.DelegateCall.delegate_index",
              "pte.BackendDelegateDataReference", "pte.JumpFalseCall.destination_instruction",
              "pte.AllocationDetails.memory_id", "pte.AllocationDetails.memory_offset_low", "pte.Tensor.sizes[]",
              "pte.Tensor.dim_order[]", "pte.Tensor.scalar_type", "pte.Tensor.data_buffer_idx",
              "pte.Tensor.shape_dynamism", "pte.ExtraTensorInfo", "pte.Int.int_val", "pte.CompileSpec.value[]")


def _retargeted(draw, s: Subject, fields: list[Field]) -> Mutation:
    """One or two of ``fields`` of the subject's program, each set to what :func:`_retarget_value` draws."""
    writes, notes = [], []
    for _ in range(draw(st.integers(1, 2))):
        f = draw(st.sampled_from(fields))
        value = draw(_retarget_value(f, s.pools))
        writes.append(("write", f.pos, le(value, f.size)))
        notes.append(f"{f.name} = {value}")
    return Mutation("pte", writes, "; ".join(notes))


@st.composite
def retargets(draw, subjects: dict, ptd: bool = False):
    """One or two indices of a program set to other things it has (the flatbuffer stays valid)."""
    s = subjects[draw(st.sampled_from(list(subjects)))]
    return s, _retargeted(draw, s, s.map.named(*RETARGETED))


@st.composite
def blob_retargets(draw, subjects: dict, ptd: bool = False):
    """One or two fields of an XNNPACK blob (value ids, external ids, flags, dims, datatypes) retargeted."""
    s = subjects[draw(st.sampled_from([n for n, s in subjects.items() if s.blob_fields]))]
    return s, _retargeted(draw, s, s.blob_fields)


# Retargeted indices also run from a read-only map, where a write into the program's bytes faults.
test_program_retargeted_indices = fuzz(retargets, sources=("bytes", "readonly"))
test_xnnpack_blob_retargeted_fields = fuzz(blob_retargets, sources=("bytes", "readonly"))


# Mutations the structure-aware fuzzer found, each once a crash, an Internal error or a write into the
# program's bytes, now refused at load: (subject, [(field, which occurrence of it, value)], what the error says).
FOUND = [
    # A kernel's out retargeted at a constant (the weight): pterun wrote the caller's bytes.
    ("stateful", [("pte.KernelCall.args[]", 14, 0)], "writes value 0, a constant"),
    # A kernel argument retargeted at an int and at an int list where it reads a tensor.
    ("external", [("pte.KernelCall.args[]", 2, 5)], "argument 2 is value 5, of kind int; it takes tensor"),
    ("external", [("pte.KernelCall.args[]", 2, 6)], "argument 2 is value 6, of kind int_list; it takes tensor"),
    # An XNNPACK bias whose dims no longer fit the layer.
    ("xnnpack-linear", [("xnngraph.XNNTensorValue.dims[]", 4, 0)], "bias [0] for 3 output channels"),
    # An XNNPACK delegate's output of another dtype, an input of another size, and one value passed as both.
    ("xnnpack-linear", [("pte.Tensor.scalar_type", 1, 2)], "is given a torch.int16 tensor of sizes [3, 3]"),
    ("xnnpack-linear", [("pte.ExecutionPlan.inputs[]", 0, 1), ("pte.Tensor.sizes[]", 0, 9)],
     "is given a torch.float32 tensor of sizes [9, 3]"),
    ("xnnpack-q8-dense", [("pte.DelegateCall.args[]", 1, 0)], "is given a torch.float32 tensor of sizes [8, 48]"),
]


@pytest.mark.parametrize("name, writes, expected", FOUND, ids=[f"{n}-{w[0][0]}" for n, w, _ in FOUND])
def test_found_by_retargeting(worker, subjects, name, writes, expected):
    s = subjects[name]
    fields = s.map.fields + s.blob_fields
    steps = []
    for field_name, which, value in writes:
        f = [g for g in fields if g.name == field_name][which]
        steps.append(("write", f.pos, le(value, f.size)))
    mutation = Mutation("pte", steps, str(writes))
    assert mutation.apply(s.pte) != s.pte  # premise: the file changed
    pte = mutation.apply(s.pte)
    for source in ("bytes", "readonly"):
        reply = worker.ask({"pte": pte, "ptd": s.ptd, "inputs": s.inputs, "levels": [0, 1], "source": source,
                            "summary": True})
        for outcome in reply["outcomes"]:
            errors = [outcome] if outcome[0] == "pte" else [r for r in outcome[1].values() if isinstance(r, tuple)]
            assert outcome[0] != "error", outcome
            assert any(code == 0x23 and expected in message for _, code, message in errors), outcome
