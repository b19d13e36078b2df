"""Mutations that ignore what the bytes mean: truncations, bit flips in headers, offsets and lengths,
indices and sizes set to other (often huge) values, and random overwrites, of programs and of data files."""

from __future__ import annotations

import os

import pytest
from hypothesis import strategies as st

from tests.executor.malformed.subjects import Mutation, check, fuzz, le

HUGE = [
    0x7F, 0x80, 0xFF, 0x7FFF, 0xFFFF, 0x10000, 0x100000, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 1 << 40,
    (1 << 62) - 1, 1 << 62, (1 << 63) - 1, 1 << 63, (1 << 64) - 1,
]

# Scalars that index or tag something: values, operators, delegates, segments, buffers, instructions, enums.
INDEX_FIELDS = (
    "pte.KernelCall", "pte.DelegateCall", "pte.MoveCall", "pte.JumpFalseCall", "pte.FreeCall",
    "pte.ExecutionPlan.inputs", "pte.ExecutionPlan.outputs", "pte.TensorList", "pte.IntList",
    "pte.OptionalTensorList", "pte.Tensor", "pte.AllocationDetails.memory_id", "pte.BackendDelegateDataReference",
    "pte.SubsegmentOffsets.segment_index", "pte.NamedData.segment_index", "pte.NonConstBufferDevice",
    "pte.ExtraTensorInfo", "pte.EValue.val_type", "pte.Instruction.instr_args_type", "pte.Program.version",
    "pte.Int.int_val", "pte.Bool", "pte.Chain",
    "ptd.NamedData.segment_index", "ptd.TensorLayout", "ptd.FlatTensor.version",
)
# Scalars that size or place something.
SIZE_FIELDS = (
    "header.", "pte.Tensor.sizes", "pte.ExecutionPlan.non_const_buffer_sizes", "pte.DataSegment",
    "pte.SubsegmentOffsets.offsets", "pte.AllocationDetails.memory_offset", "pte.Tensor.storage_offset",
    "ptd.DataSegment", "ptd.TensorLayout.sizes",
)


@st.composite
def targets(draw, subjects: dict, *, ptd: bool):
    """A subject and the file of it to mutate: its program, or its data file."""
    names = [n for n, s in subjects.items() if s.ptd] if ptd else list(subjects)
    s = subjects[draw(st.sampled_from(names))]
    return (s, "ptd", s.ptd_map) if ptd else (s, "pte", s.map)


@st.composite
def truncations(draw, subjects: dict, ptd: bool = False):
    s, target, m = draw(targets(subjects, ptd=ptd))
    cut = draw(st.one_of(
        st.sampled_from(sorted(m.boundaries)).flatmap(lambda b: st.integers(max(b - 2, 0), min(b + 2, m.length))),
        st.integers(0, m.length - 1),
    ))
    return s, Mutation(target, [("truncate", cut)])


@st.composite
def header_flips(draw, subjects: dict, ptd: bool = False):
    s, target, m = draw(targets(subjects, ptd=ptd))
    end = min(56 if ptd else 40, m.length)
    flips = draw(st.lists(st.tuples(st.integers(0, end - 1), st.integers(0, 7)), min_size=1, max_size=3))
    return s, Mutation(target, [("flip", p, b) for p, b in flips])


@st.composite
def offset_flips(draw, subjects: dict, ptd: bool = False):
    s, target, m = draw(targets(subjects, ptd=ptd))
    spots = st.one_of(
        st.sampled_from(m.offsets).flatmap(lambda p: st.tuples(st.integers(p, p + 3), st.integers(0, 7))),
        st.sampled_from(m.vtable_entries).flatmap(lambda p: st.tuples(st.integers(p, p + 1), st.integers(0, 7))),
        st.sampled_from(m.lengths).flatmap(lambda p: st.tuples(st.integers(p, p + 3), st.integers(0, 7))),
    )
    flips = draw(st.lists(spots, min_size=1, max_size=2))
    return s, Mutation(target, [("flip", p, b) for p, b in flips])


@st.composite
def index_values(draw, subjects: dict, ptd: bool = False):
    s, target, m = draw(targets(subjects, ptd=ptd))
    f = draw(st.sampled_from(m.named(*INDEX_FIELDS)))
    value = draw(st.one_of(st.integers(-2, 16), st.sampled_from(HUGE), st.integers(0, (1 << (8 * f.size)) - 1)))
    return s, Mutation(target, [("write", f.pos, le(value, f.size))], f"{f.name} = {value}")


@st.composite
def oversized(draw, subjects: dict, ptd: bool = False):
    s, target, m = draw(targets(subjects, ptd=ptd))
    spots = [(f.pos, f.size, f.name) for f in m.named(*SIZE_FIELDS)] + [(p, 4, "vector length") for p in m.lengths]
    pos, size, name = draw(st.sampled_from(spots))
    value = draw(st.one_of(st.sampled_from(HUGE), st.integers(0, (1 << (8 * size)) - 1)))
    return s, Mutation(target, [("write", pos, le(value, size))], f"{name} = {value}")


@st.composite
def overwrites(draw, subjects: dict, ptd: bool = False):
    s, target, m = draw(targets(subjects, ptd=ptd))
    writes = draw(st.lists(
        st.tuples(st.integers(0, m.length - 1), st.binary(min_size=1, max_size=8)), min_size=1, max_size=6
    ))
    return s, Mutation(target, [("write", p, raw) for p, raw in writes])


# Truncations and header flips also go through the memory-mapped and memoryview readers.
test_truncated_program = fuzz(truncations, sources=("bytes", "path", "memoryview"))
test_program_header_bit_flips = fuzz(header_flips, sources=("bytes", "path"))
test_program_offset_bit_flips = fuzz(offset_flips)
test_program_index_values = fuzz(index_values)
test_program_oversized_sizes = fuzz(oversized)
test_program_random_overwrites = fuzz(overwrites)
test_truncated_data_file = fuzz(truncations, ptd=True, sources=("bytes", "path"))
test_data_file_header_bit_flips = fuzz(header_flips, ptd=True)
test_data_file_offset_bit_flips = fuzz(offset_flips, ptd=True)
test_data_file_values = fuzz(index_values, ptd=True)
test_data_file_oversized_sizes = fuzz(oversized, ptd=True)
test_data_file_random_overwrites = fuzz(overwrites, ptd=True)


@pytest.mark.parametrize("name, target", [("sin-inline-dense", "pte"), ("stateful", "pte"),
                                          ("inline-constants", "pte"), ("external-dense", "ptd")])
def test_every_offset_and_length_flipped(worker, subjects, name, target):
    """Every offset, vtable slot and length of a file, each with one bit flipped.

    Random choices reach a given offset of a given file rarely; this visits
    each, flipping one bit of its low byte (a nearby, often still plausible
    value) and one above it (a far one), varying which from word to word.
    PTERUN_FUZZ_SWEEP=1 flips every bit of every one.
    """
    s = subjects[name]
    m = s.ptd_map if target == "ptd" else s.map
    words = sorted([(p, 32) for p in m.offsets + m.lengths] + [(p, 16) for p in m.vtable_entries])
    every_bit = os.environ.get("PTERUN_FUZZ_SWEEP") == "1"
    for i, (pos, width) in enumerate(words):
        for bit in range(width) if every_bit else [(i * 3) % 8, 8 + (i * 7) % (width - 8)]:
            check(worker, s, Mutation(target, [("flip", pos + bit // 8, bit % 8)]))
