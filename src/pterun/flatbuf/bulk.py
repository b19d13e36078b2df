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

_SPAN = {w: np.arange(w, dtype=np.int64) for w in (2, 4, 8)}
# NumPy's type codes, and struct's for the same types.
_CODES = {"?": "<?", "<u1": "<B", "<i1": "<b", "<u2": "<H", "<i2": "<h", "<i4": "<i", "<u4": "<I", "<i8": "<q",
          "<u8": "<Q", "<f4": "<f", "<f8": "<d"}
_DTYPES = {code: np.dtype(code) for code in _CODES}
_UNPACK = {code: struct.Struct(packed).unpack_from for code, packed in _CODES.items()}
_FEW = 16  # up to this many tables or positions, struct: NumPy costs microseconds a call
ABSENT = -1  # the position of an absent table, string or vector


class Bytes:
    """A buffer as NumPy bytes, read at arrays of positions."""

    def __init__(self, buf) -> None:
        self.u8 = np.frombuffer(buf, np.uint8)
        self.size = len(self.u8)
        self._buf = buf

    def one(self, pos: int, dtype: str):
        """The ``dtype`` at ``pos``."""
        width = _DTYPES[dtype].itemsize
        if not 0 <= pos <= self.size - width:
            raise ValueError(f"a {width}-byte read at byte {pos} falls outside the {self.size}-byte buffer")
        return _UNPACK[dtype](self._buf, pos)[0]

    def u32(self, pos: int) -> int:
        return self.one(pos, "<u4")

    def gather(self, pos: np.ndarray, dtype: str) -> np.ndarray:
        """The ``dtype`` (little-endian) at each of ``pos`` (int64)."""
        dt = _DTYPES[dtype]
        width = dt.itemsize
        if len(pos) <= _FEW:
            # A few positions (a plan's own fields, a small XNNPACK graph's): struct is cheaper than NumPy's indexing.
            unpack, last = _UNPACK[dtype], self.size - width
            at = pos.tolist()
            if at and not 0 <= min(at) <= max(at) <= last:
                raise ValueError(f"a {width}-byte read falls outside the {self.size}-byte buffer")
            return np.array([unpack(self._buf, p)[0] for p in at], dt)
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
        if len(pos) <= _FEW:
            at = pos.tolist()
            lengths = [0 if p == ABSENT else self.one(p, "<u4") for p in at]
            charge(sum(lengths))
            code, width = _CODES[dtype], _DTYPES[dtype].itemsize
            out = []
            for p, n in zip(at, lengths):
                if n and p + 4 + n * width > self.size:
                    raise ValueError(f"a vector of {n} elements at byte {p} runs past the {self.size}-byte buffer")
                out.append(list(struct.unpack_from(f"<{n}{code[1]}", self._buf, p + 4)) if n else [])
            return out
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

    def span(self, pos: int, width: int) -> tuple[int, int]:
        """(start, length) of the vector of ``width``-byte elements at ``pos``; (0, 0) where absent or empty."""
        if pos == ABSENT:
            return 0, 0
        length = self.u32(pos)
        if length and pos + 4 + length * width > self.size:
            raise ValueError(f"a vector of {length} elements at byte {pos} runs past the {self.size}-byte buffer")
        return (pos + 4 if length else 0), length

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
        # A few tables (a plan, its chain, a delegate) are read field by field with struct: for them
        # NumPy's fixed cost per call is most of the time.
        self._few = None
        if len(pos) <= _FEW:
            self._few = list(zip(pos.tolist(), self.vtable.tolist(), self.vtable_size.tolist()))

    def __len__(self) -> int:
        return len(self.pos)

    def offsets(self, field: str) -> np.ndarray:
        """Each table's offset of ``field`` from its start; 0 where absent."""
        slot = self.slots[field]
        if self._few is not None:
            return np.array([self.data.one(vt + slot, "<u2") if size >= slot + 2 else 0
                             for _, vt, size in self._few], np.int64)
        out = np.zeros(len(self.pos), np.int64)
        present = self.vtable_size >= slot + 2
        out[present] = self.data.gather(self.vtable[present] + slot, "<u2")
        return out

    def scalar(self, field: str, dtype: str, default=0) -> np.ndarray:
        off = self.offsets(field)
        if self._few is not None:
            return np.array([self.data.one(p + o, dtype) if o else default
                             for (p, _, _), o in zip(self._few, off.tolist())], _DTYPES[dtype])
        out = np.full(len(self.pos), default, np.dtype(dtype).newbyteorder("="))
        present = off != 0
        out[present] = self.data.gather(self.pos[present] + off[present], dtype)
        return out

    def ref(self, field: str) -> np.ndarray:
        """Where each table's ``field`` (a table, vector or string) lies; ABSENT where absent."""
        off = self.offsets(field)
        if self._few is not None:
            return np.array([p + o + self.data.one(p + o, "<u4") if o else ABSENT
                             for (p, _, _), o in zip(self._few, off.tolist())], np.int64)
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
