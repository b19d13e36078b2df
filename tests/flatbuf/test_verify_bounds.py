"""The FlatBuffers verifier's bounds: nesting depth, work on shared sub-tables, and any corruption.

Nesting stays under the depth limit, and sub-tables shared so often that a
naive walk would never finish are refused in time linear in the buffer; any
damage at all raises the caller's error class or nothing.
"""

from __future__ import annotations

import time

import flatbuffers
from hypothesis import given, settings
from hypothesis import strategies as st

from pterun.errors import InvalidProgram
from pterun.flatbuf.verify import MAX_DEPTH, verify_buffer
from tests.flatbuf.schema import LAYOUT, check, fails, finish, node, offsets, sample

# -- depth and work ---------------------------------------------------------------------------------------


def _chain(depth: int) -> bytes:
    b = flatbuffers.Builder(64)
    table = node(b, value=0)
    for _ in range(depth - 1):
        table = node(b, child=table)
    return finish(b, slot=1, offset=table)


def test_nesting_up_to_the_limit():
    check(_chain(MAX_DEPTH - 1))  # the root is depth 1


def test_nesting_past_the_limit():
    fails(_chain(MAX_DEPTH), f"nested deeper than {MAX_DEPTH}")
    fails(_chain(1000), f"nested deeper than {MAX_DEPTH}")


def _diamonds(levels: int) -> bytes:
    """Each node's left and right are the same node below it: 2**levels paths to the bottom."""
    b = flatbuffers.Builder(64)
    table = node(b, value=1)
    for _ in range(levels):
        table = node(b, left=table, right=table)
    return finish(b, slot=1, offset=table)


def test_shared_subtables_are_bounded():
    small = _diamonds(3)  # 16 visits, the least any buffer is allowed
    check(small)
    start = time.perf_counter()
    fails(_diamonds(50), "more tables than the buffer can hold")
    assert time.perf_counter() - start < 1.0


def test_shared_vector_of_strings_is_bounded():
    # Every node of a long vector shares one long vector of strings: nodes * strings visits.
    b = flatbuffers.Builder(1 << 16)
    strings = offsets(b, [b.CreateString("s")] * 2000)
    buf = finish(b, slot=3, offset=offsets(b, [node(b, names=strings)] * 2000))
    start = time.perf_counter()
    fails(buf, "more strings than the buffer can hold")
    assert time.perf_counter() - start < 1.0


def test_budget_allows_every_distinct_table():
    # A buffer of many distinct small tables stays well inside one visit per 4 bytes.
    b = flatbuffers.Builder(1 << 16)
    check(finish(b, slot=3, offset=offsets(b, [node(b, value=i) for i in range(3000)])))


# -- any corruption: the caller's error class or nothing ------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_corrupt_buffers_raise_only_the_callers_error(data):
    buf = bytearray(sample(kind_type=data.draw(st.sampled_from([1, 2]))))
    for pos, value in data.draw(st.lists(st.tuples(st.integers(0, len(buf) - 1), st.integers(0, 255)), max_size=6)):
        buf[pos] = value
    if data.draw(st.booleans()):
        del buf[data.draw(st.integers(0, len(buf))) :]
    try:
        verify_buffer(memoryview(bytes(buf)), LAYOUT)
    except InvalidProgram:
        pass
