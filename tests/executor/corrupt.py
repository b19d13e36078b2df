"""Where a program keeps the indices its instructions use, so a test can retarget one in place.

Changing one of them keeps the flatbuffer valid (the verifier still passes)
while the program now means something else: the kind of corruption a bit
flip in an index makes, and the kind a hostile file is made of.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from pterun.format import ProgramFile, TensorSpec
from pterun.format._generated import program_generated as fb


@dataclass(frozen=True)
class Call:
    instruction: int
    name: str  # "aten::addmm.out", or the backend id of a delegate call
    args: tuple[int, ...]  # value indices
    positions: tuple[int, ...]  # where each index is stored in the file (int32, little-endian)


def calls(data: bytes, method: str = "forward") -> list[Call]:
    """Every kernel and delegate call of ``method``, with the file position of each argument index."""
    root = fb.Program.GetRootAs(data, 0)
    plan_file = ProgramFile(data).plan(method)
    for p in range(root.ExecutionPlanLength()):
        plan = root.ExecutionPlan(p)
        if plan.Name().decode() == method:
            break
    else:
        raise KeyError(method)
    found = []
    chain = plan.Chains(0)
    for n in range(chain.InstructionsLength()):
        ins = chain.Instructions(n)
        table = ins.InstrArgs()
        kind = ins.InstrArgsType()
        if kind == fb.InstructionArguments.KernelCall:
            call = fb.KernelCall()
            call.Init(table.Bytes, table.Pos)
            op, overload = plan_file.operators[call.OpIndex()]
            name = f"{op}.{overload}" if overload else op
            slot = 6
        elif kind == fb.InstructionArguments.DelegateCall:
            call = fb.DelegateCall()
            call.Init(table.Bytes, table.Pos)
            name = plan_file.delegates[call.DelegateIndex()].backend_id
            slot = 6
        else:
            continue
        start = call._tab.Vector(call._tab.Offset(slot))
        args = tuple(call.Args(i) for i in range(call.ArgsLength()))
        found.append(Call(n, name, args, tuple(start + 4 * i for i in range(len(args)))))
    return found


def call(data: bytes, name: str, method: str = "forward") -> Call:
    """The first call of operator (or backend) ``name``."""
    return next(c for c in calls(data, method) if c.name == name)


def constants(data: bytes, method: str = "forward") -> list[int]:
    """Value indices of the method's constant tensors."""
    plan = ProgramFile(data).plan(method)
    return [i for i, v in enumerate(plan.values) if isinstance(v, TensorSpec) and v.is_constant]


def retarget(data: bytes, position: int, value: int) -> bytes:
    """``data`` with the int32 index at ``position`` replaced by ``value``."""
    out = bytearray(data)
    struct.pack_into("<i", out, position, value)
    return bytes(out)
