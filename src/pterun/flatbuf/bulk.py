"""Many tables of one type read at once: NumPy gathers over a buffer's bytes.

The generated readers cost a few microseconds per field; a method of a
thousand values has tens of thousands of fields. Here the tables of one type
(all of a plan's tensors, say) are read together: one gather per field, with
the field's vtable slot taken from the schema's layout table (the same one
the verifier walks), so no offset is written by hand.

Every gather is bounds-checked, so an unverified buffer (Verification.Minimal)
fails with ``ValueError`` instead of reading outside it or wrapping around.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from types import ModuleType

import numpy as np

_U32 = struct.Struct("<I").unpack_from
_SPAN = {w: np.arange(w, dtype=np.int64) for w in (2, 4, 8)}
_DTYPES = {code: np.dtype(code) for code in ("<u1", "<i1", "<u2", "<i4", "<u4", "<i8", "<u8", "<f8")}
ABSENT = -1  # the position of an absent table, string or vector


class Bytes:
    """A buffer as NumPy bytes, read at arrays of positions."""

    def __init__(self, buf) -> None:
        self.u8 = np.frombuffer(buf, np.uint8)
        self.size = len(self.u8)
        self._buf = buf

    def u32(self, pos: int) -> int:
        """The uint32 at ``pos``."""
        if not 0 <= pos <= self.size - 4:
            raise ValueError(f"a 4-byte read at byte {pos} falls outside the {self.size}-byte buffer")
        return _U32(self._buf, pos)[0]

    def gather(self, pos: np.ndarray, dtype: str) -> np.ndarray:
        """The ``dtype`` (little-endian) at each of ``pos`` (int64)."""
        dt = _DTYPES[dtype]
        width = dt.itemsize
        if not len(pos):
            return np.empty(0, dt)
        # One bound for both ends: a negative position is a huge unsigned one.
        if int(pos.view(np.uint64).max()) > self.size - width:
            raise ValueError(f"a {width}-byte read falls outside the {self.size}-byte buffer")
        if width == 1:
            return self.u8[pos].view(dt)
        return self.u8[pos[:, None] + _SPAN[width]].view(dt).reshape(-1)

    def follow(self, pos: np.ndarray) -> np.ndarray:
        """Where the offsets at ``pos`` point (ABSENT stays ABSENT)."""
        out = np.full(len(pos), ABSENT, np.int64)
        present = pos != ABSENT
        out[present] = pos[present] + self.gather(pos[present], "<u4")
        return out

    def vectors(self, pos: np.ndarray, dtype: str, charge: Callable[[int], object]) -> list[list]:
        """Each vector at ``pos`` as a list (an absent one empty); ``charge`` is told how many elements they
        hold in all before any is read."""
        present = pos != ABSENT
        lengths = np.zeros(len(pos), np.int64)
        lengths[present] = self.gather(pos[present], "<u4")
        total = int(lengths.sum())
        charge(total)
        width = np.dtype(dtype).itemsize
        if total > self.size:
            raise ValueError(f"vectors of {total} elements do not fit in the {self.size}-byte buffer")
        ends = np.cumsum(lengths)
        starts = ends - lengths
        # Element k of the flattened vectors lies at its vector's data + width * (k - the vector's first k).
        base = np.repeat(pos + 4 - width * starts, lengths)
        flat = self.gather(base + width * np.arange(total, dtype=np.int64), dtype).tolist()
        return [flat[a:b] for a, b in zip(starts.tolist(), ends.tolist())]

    def string(self, pos: int) -> bytes | None:
        if pos == ABSENT:
            return None
        length = self.u32(pos)
        if pos + 4 + length > self.size:
            raise ValueError(f"a {length}-byte string at byte {pos} runs past the {self.size}-byte buffer")
        return self.u8[pos + 4 : pos + 4 + length].tobytes()


class Tables:
    """The tables of type ``name`` (of ``layout``'s schema) at ``pos``: each field read for all of them at once."""

    def __init__(self, data: Bytes, layout: ModuleType, name: str, pos: np.ndarray) -> None:
        self.data = data
        self.pos = pos
        self.slots = {field: voffset for field, voffset, *_ in layout.TABLES[name]}
        self.vtable = pos - data.gather(pos, "<i4")
        self.vtable_size = data.gather(self.vtable, "<u2").astype(np.int64)

    def __len__(self) -> int:
        return len(self.pos)

    def offsets(self, field: str) -> np.ndarray:
        """Each table's offset of ``field`` from its start; 0 where absent."""
        slot = self.slots[field]
        out = np.zeros(len(self.pos), np.int64)
        present = self.vtable_size >= slot + 2
        out[present] = self.data.gather(self.vtable[present] + slot, "<u2")
        return out

    def scalar(self, field: str, dtype: str, default=0) -> np.ndarray:
        off = self.offsets(field)
        out = np.full(len(self.pos), default, np.dtype(dtype).newbyteorder("="))
        present = off != 0
        out[present] = self.data.gather(self.pos[present] + off[present], dtype)
        return out

    def ref(self, field: str) -> np.ndarray:
        """Where each table's ``field`` (a table, vector or string) lies; ABSENT where absent."""
        off = self.offsets(field)
        at = np.where(off != 0, self.pos + off, ABSENT)
        return self.data.follow(at)

    def vector_of_tables(self, field: str) -> tuple[np.ndarray, int]:
        """For a single table: the positions of the tables in its vector ``field`` (none where absent)."""
        (at,) = self.ref(field).tolist()
        if at == ABSENT:
            return np.zeros(0, np.int64), 0
        length = self.data.u32(at)
        if 4 * length > self.data.size:
            raise ValueError(f"a vector of {length} tables at byte {at} does not fit in the buffer")
        slots = at + 4 + 4 * np.arange(length, dtype=np.int64)
        return self.data.follow(slots), length
