"""Reads one method of a program (an ExecutionPlan) from the flatbuffer into the plain objects of ``plan.py``.

Everything a method needs at load time is read here once: its values
(``value_reader.py``), the instructions of its chains, its operators and
delegates, and its memory plan; ``check_plan`` then checks every index. Tables
of one type are read together (``flatbuf/bulk.py``) rather than one generated
accessor call per field. Every element read is charged to the read budget
(``budget.py``).
"""

from __future__ import annotations

import numpy as np

from pterun.errors import InvalidProgram
from pterun.flatbuf.bulk import ABSENT, Bytes, Tables
from pterun.format._generated import program_generated as fb
from pterun.format._generated import program_layout as layout
from pterun.format.budget import charge, read_budget, string
from pterun.format.plan import (
    DelegateCall,
    DelegateSpec,
    FreeCall,
    Instruction,
    JumpFalseCall,
    KernelCall,
    MoveCall,
    Plan,
    check_plan,
)
from pterun.format.value_reader import check_device, read_values

_DATA_LOCATIONS = (fb.DataLocation.INLINE, fb.DataLocation.SEGMENT)
_KINDS = fb.InstructionArguments
# Each kind of instruction: its table, its two fields (the second a vector of arguments when "args") and the call.
_INSTRUCTIONS = {
    _KINDS.KernelCall: ("pte.KernelCall", "op_index", "args", KernelCall),
    _KINDS.DelegateCall: ("pte.DelegateCall", "delegate_index", "args", DelegateCall),
    _KINDS.MoveCall: ("pte.MoveCall", "move_from", "move_to", MoveCall),
    _KINDS.JumpFalseCall: ("pte.JumpFalseCall", "cond_value_index", "destination_instruction", JumpFalseCall),
    _KINDS.FreeCall: ("pte.FreeCall", "value_index", None, FreeCall),
}


def read_plan(data: Bytes, pos: int) -> Plan:
    """The execution plan whose table lies at byte ``pos`` of ``data``."""
    with read_budget(data.size):
        return _read_plan(data, Tables(data, layout, "pte.ExecutionPlan", np.array([pos], np.int64)))


def _text(data: Bytes, tables: Tables, field: str) -> list[str | None]:
    return [string(data.string(r)) for r in tables.ref(field).tolist()]


def _ints(data: Bytes, tables: Tables, field: str, dtype: str) -> tuple[int, ...]:
    (items,) = data.vectors(tables.ref(field), dtype, charge)
    return tuple(items)


def _instructions(data: Bytes, positions: np.ndarray, where: str) -> tuple[Instruction, ...]:
    charge(len(positions))
    ins = Tables(data, layout, "pte.Instruction", positions)
    tags = ins.scalar("instr_args_type", "<u1").tolist()
    members = ins.ref("instr_args")
    tag_array = np.array(tags, np.int64)
    made = {}
    present = set(tags)
    for kind, (table, first, second, call) in _INSTRUCTIONS.items():
        if kind not in present:
            continue
        at = members[(tag_array == kind) & (members != ABSENT)]
        if not len(at):
            continue
        t = Tables(data, layout, table, at)
        firsts = t.scalar(first, "<i4").tolist()
        if second == "args":
            args = data.vectors(t.ref("args"), "<i4", charge)
            made[kind] = [call(a, tuple(b)) for a, b in zip(firsts, args)]
        elif second is not None:
            made[kind] = [call(a, b) for a, b in zip(firsts, t.scalar(second, "<i4").tolist())]
        else:
            made[kind] = [call(a) for a in firsts]
    taken = dict.fromkeys(made, 0)
    out = []
    for i, (tag, member) in enumerate(zip(tags, members.tolist())):
        if member == ABSENT:
            raise InvalidProgram(f"{where} instruction {i}: instruction of kind {tag} has no arguments")
        if tag not in made:
            raise InvalidProgram(f"{where} instruction {i}: unknown instruction kind {tag}")
        out.append(made[tag][taken[tag]])
        taken[tag] += 1
    return tuple(out)


def _delegates(data: Bytes, positions: np.ndarray, where: str) -> tuple[DelegateSpec, ...]:
    charge(len(positions))
    d = Tables(data, layout, "pte.BackendDelegate", positions)
    out = []
    for i, (backend_id, processed) in enumerate(zip(_text(data, d, "id"), d.ref("processed").tolist())):
        if not backend_id or processed == ABSENT:
            raise InvalidProgram(f"{where}: delegate {i} has no backend id or no processed data")
        one = Tables(data, layout, "pte.BackendDelegate", positions[i : i + 1])
        spec_pos, count = one.vector_of_tables("compile_specs")
        charge(count)
        specs = Tables(data, layout, "pte.CompileSpec", spec_pos)
        values = data.vectors(specs.ref("value"), "<u1", charge)
        keys = [k or "" for k in _text(data, specs, "key")]
        ref = Tables(data, layout, "pte.BackendDelegateDataReference", np.array([processed], np.int64))
        (location,) = ref.scalar("location", "<i1").tolist()
        if location not in _DATA_LOCATIONS:
            raise InvalidProgram(f"{where}: delegate {i} data location {location} is not one of INLINE, SEGMENT")
        (index,) = ref.scalar("index", "<u4").tolist()
        out.append(DelegateSpec(backend_id, location == fb.DataLocation.INLINE, index,
                                tuple(zip(keys, map(bytes, values)))))
    return tuple(out)


def _read_plan(data: Bytes, p: Tables) -> Plan:
    (name,) = _text(data, p, "name")
    if name is None:
        raise InvalidProgram("an execution plan has no name")
    where = f"method {name!r}"
    if ABSENT in (p.ref("inputs")[0], p.ref("outputs")[0], p.ref("non_const_buffer_sizes")[0]):
        raise InvalidProgram(f"{where}: inputs, outputs or non_const_buffer_sizes is missing")
    values = read_values(data, p.vector_of_tables("values")[0], where)
    chains, count = p.vector_of_tables("chains")
    instructions: tuple[Instruction, ...] = ()
    if count:
        chain = Tables(data, layout, "pte.Chain", chains[:1])
        instructions = _instructions(data, chain.vector_of_tables("instructions")[0], where)
    op_pos, count = p.vector_of_tables("operators")
    charge(count)
    ops = Tables(data, layout, "pte.Operator", op_pos)
    operators = []
    for i, (op_name, overload) in enumerate(zip(_text(data, ops, "name"), _text(data, ops, "overload"))):
        if not op_name:
            raise InvalidProgram(f"{where}: operator {i} has no name")
        operators.append((op_name, overload or ""))
    delegates = _delegates(data, p.vector_of_tables("delegates")[0], where)
    buffer_sizes = _ints(data, p, "non_const_buffer_sizes", "<i8")
    dev_pos, count = p.vector_of_tables("non_const_buffer_device")
    charge(count)
    dev = Tables(data, layout, "pte.NonConstBufferDevice", dev_pos)
    devices = {}
    for idx, device_type, device_index in zip(dev.scalar("buffer_idx", "<i4").tolist(),
                                              dev.scalar("device_type", "<i1").tolist(),
                                              dev.scalar("device_index", "<i1").tolist()):
        check_device(device_type, device_index, f"{where} buffer {idx}")
        devices[idx] = (device_type, device_index)
    meta_pos = p.ref("container_meta_type")
    meta = Tables(data, layout, "pte.ContainerMetadata", meta_pos) if meta_pos[0] != ABSENT else None
    plan = Plan(
        name=name,
        values=values,
        inputs=_ints(data, p, "inputs", "<i4"),
        outputs=_ints(data, p, "outputs", "<i4"),
        instructions=instructions,
        operators=tuple(operators),
        delegates=delegates,
        buffer_sizes=buffer_sizes,
        buffer_devices=devices,
        input_spec=_text(data, meta, "encoded_inp_str")[0] if meta else None,
        output_spec=_text(data, meta, "encoded_out_str")[0] if meta else None,
    )
    check_plan(plan)
    return plan
