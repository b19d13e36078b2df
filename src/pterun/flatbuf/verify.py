"""A FlatBuffers structural verifier driven by generated layout tables.

The ``flatbuffers`` Python package has no verifier, and its readers trust every
offset they follow. This walks a buffer the way FlatBuffers' C++ ``Verifier``
does: every table, vtable, string and vector must lie inside the buffer and be
aligned, required fields must be present, and nesting stays under ``MAX_DEPTH``.
Once a buffer passes, the generated readers cannot read outside it.

The walk goes breadth-first, every table of one type at a time, with NumPy
over the positions (a program has thousands of tables of a handful of types;
one Python step per table costs more than reading the program).

FlatBuffers lets any number of offsets share one table, string or vector, so
a small file can describe a huge tree. The walk is bounded as readers see the
tree, path by path: it visits at most one table or string per four bytes of
input and reads at most ``DATA_PER_BYTE`` bytes of vector and string data per
byte of input, and counts what a step would visit before it makes the list. A
file written without sharing (as ExecuTorch writes them) stays far inside both
bounds; one that is not is rejected in time linear in its size.

Tables of the types in ``shallow`` are checked themselves, but what they point
to is walked only by ``Verifier.walk``, later: a program's methods are verified
when they are loaded, with what is left of the same bounds.

The layout tables (the ``_generated/*_layout.py`` beside each schema's reader)
are derived from each ``.fbs`` file by ``scripts/regen_schema.py``, so one
verifier serves every schema pterun reads: programs, data files and delegate
blobs.
"""

from __future__ import annotations

from types import ModuleType

import numpy as np

from pterun.errors import InvalidProgram, PteError
from pterun.flatbuf.bulk import Bytes

MAX_DEPTH = 64
DATA_PER_BYTE = 4
_FOLLOWED = ("table", "union", "vtable")  # the kinds of field a shallow table does not follow


class _Failed(Exception):
    pass


def _first(bad: np.ndarray, *columns):
    i = int(np.argmax(bad))
    return [int(c[i]) if isinstance(c, np.ndarray) else c for c in columns]


class Verifier:
    """A buffer's walk, and what is left of its bounds for the tables it deferred."""

    def __init__(self, buf, layout: ModuleType, error: type[PteError], shallow: frozenset[str]) -> None:
        self.data = Bytes(buf)
        self.size = self.data.size
        self.layout = layout
        self.error = error
        self.shallow = shallow
        self.budget = max(16, self.size // 4)
        self.data_budget = DATA_PER_BYTE * self.size

    def walk(self, pos: int, name: str, depth: int) -> None:
        """Verifies the table ``name`` at ``pos`` (of nesting ``depth``) and everything below it."""
        try:
            self._run({name: [(np.array([pos], np.int64), np.array([depth], np.int64))]}, deep=True)
        except _Failed as failed:
            raise self.error(f"{self.layout.ROOT.split('.')[-1]} verification failed: {failed}") from None

    # -- bounds ------------------------------------------------------------------------------------------

    def spend(self, n: int, what: str) -> None:
        self.budget -= n
        if self.budget < 0:
            raise _Failed(f"more {what} than the buffer can hold")

    def spend_data(self, nbytes: np.ndarray, what: str) -> None:
        self.data_budget -= int(nbytes.sum())
        if self.data_budget < 0:
            raise _Failed(f"{what}: shared vectors and strings add up to more than {DATA_PER_BYTE} times the buffer")

    def need(self, pos: np.ndarray, nbytes, align: int, what: str) -> None:
        outside = (pos < 0) | (pos + nbytes > self.size)
        if outside.any():
            p, n = _first(outside, pos, nbytes)
            raise _Failed(f"{what} at byte {p} (+{n}) lies outside the {self.size}-byte buffer")
        if align > 1:
            unaligned = pos % align != 0
            if unaligned.any():
                (p,) = _first(unaligned, pos)
                raise _Failed(f"{what} at byte {p} is not {align}-byte aligned")

    def u16(self, pos: np.ndarray) -> np.ndarray:
        return self.data.gather(pos, "<u2").astype(np.int64)

    def u32(self, pos: np.ndarray) -> np.ndarray:
        return self.data.gather(pos, "<u4").astype(np.int64)

    def follow(self, pos: np.ndarray, what: str) -> np.ndarray:
        # As FlatBuffers' VerifyOffset: the offset is non-zero, positive as a
        # signed 32-bit value, and lands inside the buffer, even where the
        # target itself is not verified (a union member of an unknown type).
        self.need(pos, 4, 4, what)
        offset = self.u32(pos)
        bad = (offset == 0) | (offset >= 1 << 31)
        if bad.any():
            p, o = _first(bad, pos, offset)
            raise _Failed(f"{what} at byte {p} has offset {o}")
        self.need(pos + offset, 1, 1, what)
        return pos + offset

    def strings(self, pos: np.ndarray, what: str) -> None:
        self.need(pos, 4, 4, what)
        length = self.u32(pos)
        self.need(pos + 4, length + 1, 1, what)
        unterminated = self.data.u8[pos + 4 + length] != 0
        if unterminated.any():
            (p,) = _first(unterminated, pos)
            raise _Failed(f"{what} at byte {p} is not NUL-terminated")
        self.spend_data(length, what)

    def vectors(self, pos: np.ndarray, elem_size: int, what: str, charged: bool = True) -> np.ndarray:
        self.need(pos, 4, 4, what)
        length = self.u32(pos)
        self.need(pos + 4, length * elem_size, 1, what)
        if charged:
            self.spend_data(length * elem_size, what)
        return length

    def elements(self, pos: np.ndarray, length: np.ndarray) -> np.ndarray:
        """The positions of the offsets in the vectors of tables or strings at ``pos``."""
        total = int(length.sum())
        first = np.cumsum(length) - length
        return np.repeat(pos + 4 - 4 * first, length) + 4 * np.arange(total, dtype=np.int64)

    # -- the walk ----------------------------------------------------------------------------------------

    def _run(self, pending: dict[str, list], deep: bool) -> None:
        while pending:
            name = next(iter(pending))
            batches = pending.pop(name)
            pos = np.concatenate([p for p, _ in batches])
            depth = np.concatenate([d for _, d in batches])
            self._tables(name, pos, depth, pending, follow=deep or name not in self.shallow)
            deep = False

    def _tables(self, name: str, pos: np.ndarray, depth: np.ndarray, pending: dict, follow: bool) -> None:
        if int(depth.max()) > MAX_DEPTH:
            raise _Failed(f"{name} nested deeper than {MAX_DEPTH} tables")
        self.spend(len(pos), "tables")
        self.need(pos, 4, 4, name)
        vtable = pos - self.data.gather(pos, "<i4")
        self.need(vtable, 4, 2, f"{name} vtable")
        vt_size, t_size = self.u16(vtable), self.u16(vtable + 2)
        bad = (vt_size < 4) | (vt_size & 1 == 1)
        if bad.any():
            v, s = _first(bad, vtable, vt_size)
            raise _Failed(f"{name} vtable at byte {v} has size {s}")
        self.need(vtable, vt_size, 2, f"{name} vtable")
        self.need(pos, t_size, 1, name)

        def slot(voffset: int) -> np.ndarray:
            out = np.zeros(len(pos), np.int64)
            inside = voffset < vt_size
            out[inside] = self.u16(vtable[inside] + voffset)
            return out

        def enqueue(member: str, at: np.ndarray, d: np.ndarray) -> None:
            if len(at):
                pending.setdefault(member, []).append((at, d + 1))

        for field, voffset, kind, arg, required in self.layout.TABLES[name]:
            offset = slot(voffset)
            where = f"{name}.{field}"
            present = offset != 0
            if required and not present.all():
                raise _Failed(f"{where} is required but absent")
            if not present.any() or (not follow and kind in _FOLLOWED):
                continue
            if (offset >= t_size).any():
                raise _Failed(f"{where} lies outside its table")
            fpos, d = (pos + offset)[present], depth[present]
            if kind == "scalar":
                self.need(fpos, arg, arg, where)
            elif kind == "struct":
                self.need(fpos, arg[0], arg[1], where)
            elif kind == "string":
                self.strings(self.follow(fpos, where), where)
            elif kind == "table":
                enqueue(arg, self.follow(fpos, where), d)
            elif kind == "union":
                union, type_voffset = arg
                type_offset = slot(type_voffset)[present]
                tag = np.where(type_offset != 0, self.data.u8[pos[present] + type_offset], 0)
                target = self.follow(fpos, where)
                for value, member in self.layout.UNIONS[union].items():
                    chosen = (tag == value) & (type_offset != 0)
                    if chosen.any():
                        enqueue(member, target[chosen], d[chosen])
            elif kind in ("vscalar", "vstruct"):
                self.vectors(self.follow(fpos, where), arg if kind == "vscalar" else arg[0], where)
            elif kind in ("vstring", "vtable"):
                start = self.follow(fpos, where)
                length = self.vectors(start, 4, where, charged=False)
                # Counted before they are listed (and before their offsets are charged as data, as a
                # walk table by table would first see too many of them).
                if kind == "vstring":
                    # Charged like tables: a vector of strings shared by many
                    # tables would otherwise be walked once per table.
                    self.spend(int(length.sum()), "strings")
                elif int(length.sum()) > self.budget:
                    raise _Failed("more tables than the buffer can hold")
                self.spend_data(length * 4, where)
                slots = self.follow(self.elements(start, length), where)
                if kind == "vstring":
                    self.strings(slots, where)
                else:
                    enqueue(arg, slots, np.repeat(d, length))


def verify_buffer(buf, layout: ModuleType, *, error: type[PteError] = InvalidProgram,
                  shallow: frozenset[str] = frozenset()) -> Verifier:
    """Raises ``error`` unless ``buf`` is a structurally valid buffer of ``layout``'s root table; tables of the
    types in ``shallow`` are checked but not followed (``Verifier.walk`` does that, later)."""
    verifier = Verifier(buf, layout, error, shallow)
    try:
        root = int(verifier.follow(np.zeros(1, np.int64), "root offset")[0])
    except _Failed as failed:
        raise error(f"{layout.ROOT.split('.')[-1]} verification failed: {failed}") from None
    verifier.walk(root, layout.ROOT, 1)
    return verifier
