"""flatbuf/bulk.py: reads at arrays of positions, each one bounds-checked."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from pterun.flatbuf import bulk


def test_a_vector_span_is_where_its_elements_lie():
    data = bulk.Bytes(memoryview(struct.pack("<I3H", 3, 7, 8, 9) + struct.pack("<I", 0)))
    assert data.span(0, 2) == (4, 3)
    assert data.span(10, 2) == (0, 0)  # empty
    assert data.span(bulk.ABSENT, 2) == (0, 0)


def test_a_vector_span_past_the_buffer_is_refused():
    data = bulk.Bytes(memoryview(struct.pack("<I3H", 4, 7, 8, 9)))
    with pytest.raises(ValueError, match="runs past"):
        data.span(0, 2)
    with pytest.raises(ValueError, match="outside"):
        data.span(8, 2)  # the length itself


@pytest.mark.parametrize("many", [False, True])  # struct for a few positions, NumPy for more
def test_signed_shorts_and_floats_read_as_written(many):
    count = 2 * bulk._FEW if many else 2
    raw = struct.pack(f"<{count}h", *([-2] * count)) + struct.pack(f"<{count}f", *([0.1] * count))
    data = bulk.Bytes(memoryview(raw))
    shorts = data.gather(np.arange(count, dtype=np.int64) * 2, "<i2").tolist()
    floats = data.gather(2 * count + np.arange(count, dtype=np.int64) * 4, "<f4").tolist()
    assert shorts == [-2] * count
    assert floats == [struct.unpack("<f", struct.pack("<f", 0.1))[0]] * count
