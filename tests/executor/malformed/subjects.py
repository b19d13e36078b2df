"""The programs the malformed-input tests mutate, what a mutation is, and the check every test makes."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.file_structure import Field, StructureMap, map_data_file, map_program, map_xnnpack_blobs
from tests.support.malformed_worker import Worker, WorkerDied

EXAMPLES = int(os.environ.get("PTERUN_FUZZ_EXAMPLES", "60"))
FUZZ = settings(
    max_examples=EXAMPLES, deadline=None, database=None,
    # Reproducible by default; PTERUN_FUZZ_RANDOM=1 explores new examples on every run.
    derandomize=os.environ.get("PTERUN_FUZZ_RANDOM") != "1",
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)


@dataclass
class Pools:
    """What indices in a program may be retargeted at: the values, operators, delegates, buffers it has.

    Value indices are those of the method with the fewest values, so a retargeted index exists in every
    method; each category lists the indices that are of that kind in some method."""

    values: int = 0
    tensors: list[int] = field(default_factory=list)
    constants: list[int] = field(default_factory=list)
    lists: list[int] = field(default_factory=list)
    scalars: list[int] = field(default_factory=list)
    operators: int = 0
    delegates: int = 0
    instructions: int = 0
    buffers: list[int] = field(default_factory=list)  # planned buffer sizes, index 0 included
    offsets: list[int] = field(default_factory=list)  # memory offsets of planned tensors
    sizes: list[int] = field(default_factory=list)  # every size of every tensor
    constant_buffers: int = 0
    xnn_values: int = 0  # value ids of the smallest XNNPACK graph
    xnn_externs: int = 0


def _pools(pte: bytes) -> Pools:
    from pterun.format import Kind, ListValue, ProgramFile, Scalar, TensorSpec

    program = ProgramFile(pte)
    plans = [program.plan(name) for name in program.method_names]
    p = Pools(values=min(len(plan.values) for plan in plans), operators=min(len(plan.operators) for plan in plans),
              delegates=min(len(plan.delegates) for plan in plans),
              instructions=min(len(plan.instructions) for plan in plans))
    for plan in plans:
        p.buffers = max(p.buffers, list(plan.buffer_sizes), key=len)
        for i, v in enumerate(plan.values[: p.values]):
            if isinstance(v, TensorSpec):
                (p.constants if v.is_constant else p.tensors).append(i)
                p.sizes.extend(v.sizes)
                if v.memory_id is not None:
                    p.offsets.append(v.memory_offset)
                p.constant_buffers = max(p.constant_buffers, v.data_buffer_idx)
            elif isinstance(v, ListValue) and v.kind in (Kind.TENSOR_LIST, Kind.OPTIONAL_TENSOR_LIST, Kind.INT_LIST):
                p.lists.append(i)
            elif isinstance(v, Scalar):
                p.scalars.append(i)
    for category in (p.tensors, p.constants, p.lists, p.scalars, p.offsets, p.sizes):
        category[:] = sorted(set(category)) or [0]
    return p


@dataclass(repr=False)
class Subject:
    name: str
    pte: bytes
    ptd: list[bytes]
    inputs: dict
    map: StructureMap
    ptd_map: StructureMap | None = None
    baseline: tuple | None = None
    pools: Pools = field(default_factory=Pools)
    blob_fields: list[Field] = field(default_factory=list)  # XNNPACK blobs' fields, at .pte positions

    def __repr__(self) -> str:
        return f"Subject({self.name!r})"


def subject(name: str, pte: bytes, ptd: list[bytes], inputs: dict) -> Subject:
    pools = _pools(pte)
    blob_fields, graphs = map_xnnpack_blobs(pte)
    if graphs:
        pools.xnn_values, pools.xnn_externs = min(g[0] for g in graphs), min(g[1] for g in graphs)
    return Subject(name, pte, ptd, inputs, map_program(pte), map_data_file(ptd[0]) if ptd else None,
                   pools=pools, blob_fields=blob_fields)


def assert_same(s: Subject, outcome: tuple) -> None:
    import torch

    assert outcome[0] == "ok", f"{s.name} no longer loads after the mutated files: {outcome}"
    for name, outputs in s.baseline[1].items():
        again = outcome[1][name]
        assert len(again) == len(outputs)
        for a, b in zip(again, outputs):
            assert torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b, f"{s.name}.{name} changed"


@dataclass
class Mutation:
    """What was done to the file, for the failure message (and to reproduce it by hand)."""

    target: str  # "pte" or "ptd"
    steps: list = field(default_factory=list)  # ("truncate", n) | ("write", pos, bytes) | ("flip", pos, bit)
    note: str = ""  # what the written bytes mean, e.g. "pte.Tensor.sizes[] = 4294967295"

    def apply(self, data: bytes) -> bytes:
        out = bytearray(data)
        for step in self.steps:
            if step[0] == "truncate":
                del out[step[1] :]
            elif step[0] == "flip":
                if step[1] < len(out):
                    out[step[1]] ^= 1 << step[2]
            elif step[0] == "write":
                pos, raw = step[1], step[2]
                out[pos : pos + len(raw)] = raw[: max(0, len(out) - pos)]
        return bytes(out)


def check(worker: Worker, s: Subject, mutation: Mutation, source: str = "bytes") -> None:
    pte = mutation.apply(s.pte) if mutation.target == "pte" else s.pte
    ptd = [mutation.apply(s.ptd[0])] if mutation.target == "ptd" else s.ptd
    request = {"pte": pte, "ptd": ptd, "inputs": s.inputs, "levels": [0, 1], "source": source, "summary": True}
    try:
        reply = worker.ask(request)
    except WorkerDied as died:
        pytest.fail(f"{s.name}, {mutation}: {died}")
    for level, outcome in zip(("Minimal", "InternalConsistency"), reply["outcomes"]):
        if outcome[0] == "error":
            pytest.fail(f"{s.name}, {mutation}, verification {level}, from {source}: not a PteError:\n{outcome[1]}")


def le(value: int, size: int) -> bytes:
    return (value & ((1 << (8 * size)) - 1)).to_bytes(size, "little")


def fuzz(strategy_fn, *, ptd: bool = False, sources=("bytes",)):
    """A test of each mutation ``strategy_fn(subjects, ptd=ptd)`` draws, read from one of ``sources``."""

    @FUZZ
    @given(data=st.data())
    def test(worker, subjects, data):
        s, mutation = data.draw(strategy_fn(subjects, ptd=ptd))
        source = data.draw(st.sampled_from(sources))
        check(worker, s, mutation, source)

    return test
