"""A FlatBuffers structural verifier driven by generated layout tables.

The ``flatbuffers`` Python package has no verifier, and its readers trust every
offset they follow. This walks a buffer the way FlatBuffers' C++ ``Verifier``
does: every table, vtable, string and vector must lie inside the buffer and be
aligned, required fields must be present, and nesting stays under ``MAX_DEPTH``.
Once a buffer passes, the generated readers cannot read outside it.

FlatBuffers lets any number of offsets share one table, string or vector, so
a small file can describe a huge tree. The walk is bounded as readers see the
tree, path by path: it visits at most one table or string per four bytes of
input and reads at most ``DATA_PER_BYTE`` bytes of vector and string data per
byte of input. A file written without sharing (as ExecuTorch writes them)
stays far inside both bounds; one that is not is rejected in time linear in
its size, rather than keeping this walk or any reader after it busy for hours.

Tables of the types in ``shallow`` are checked themselves, but what they point
to is walked only by ``Verifier.walk``, later, with what is left of the same
bounds: a program's methods are verified when they are loaded.

The layout tables (the ``_generated/*_layout.py`` beside each schema's reader)
are derived from each ``.fbs`` file by ``scripts/regen-schema.py``, so one
verifier serves every schema pterun reads: programs, data files and delegate
blobs.
"""

from __future__ import annotations

import struct
from types import ModuleType
from typing import Protocol

from pterun.errors import InvalidProgram, PteError

_u8 = struct.Struct("<B").unpack_from
_u16 = struct.Struct("<H").unpack_from
_u32 = struct.Struct("<I").unpack_from
_i32 = struct.Struct("<i").unpack_from

MAX_DEPTH = 64
DATA_PER_BYTE = 4
_FOLLOWED = ("table", "union", "vtable")  # the kinds of field a shallow table does not follow


class _Failed(Exception):
    pass


class VerificationMarks(Protocol):
    """Where bytes, once verified, are remembered as such (the executor's load cache): a program's flatbuffer,
    a delegate's. A key hashes the exact bytes and what verified them."""

    def key(self, *parts: bytes | str) -> str: ...
    def verified(self, key: str) -> bool: ...
    def mark_verified(self, key: str) -> None: ...


class Verifier:
    """A buffer's walk, and what is left of its bounds for the tables it did not follow."""

    def __init__(self, buf: memoryview, layout: ModuleType, error: type[PteError], shallow: frozenset[str]) -> None:
        self.buf = buf
        self.size = len(buf)
        self.layout = layout
        self.tables = layout.TABLES
        self.unions = layout.UNIONS
        self.error = error
        self.shallow = shallow
        self.budget = max(16, self.size // 4)
        self.data_budget = DATA_PER_BYTE * self.size

    def walk(self, pos: int, name: str, depth: int) -> None:
        """Verifies the table ``name`` at ``pos`` (of nesting ``depth``) and everything below it."""
        try:
            self.table(pos, name, depth, follow=True)
        except _Failed as failed:
            raise self.error(f"{self.layout.ROOT.split('.')[-1]} verification failed: {failed}") from None

    def spend(self, what: str) -> None:
        self.budget -= 1
        if self.budget < 0:
            raise _Failed(f"more {what} than the buffer can hold")

    def spend_data(self, nbytes: int, what: str) -> None:
        self.data_budget -= nbytes
        if self.data_budget < 0:
            raise _Failed(f"{what}: shared vectors and strings add up to more than {DATA_PER_BYTE} times the buffer")

    def need(self, pos: int, nbytes: int, align: int, what: str) -> None:
        if pos < 0 or pos + nbytes > self.size:
            raise _Failed(f"{what} at byte {pos} (+{nbytes}) lies outside the {self.size}-byte buffer")
        if align > 1 and pos % align:
            raise _Failed(f"{what} at byte {pos} is not {align}-byte aligned")

    def follow(self, pos: int, what: str) -> int:
        # As FlatBuffers' VerifyOffset: the offset is non-zero, positive as a
        # signed 32-bit value, and lands inside the buffer, even where the
        # target itself is not verified (a union member of an unknown type).
        self.need(pos, 4, 4, what)
        offset = _u32(self.buf, pos)[0]
        if offset == 0 or offset >= 1 << 31:
            raise _Failed(f"{what} at byte {pos} has offset {offset}")
        self.need(pos + offset, 1, 1, what)
        return pos + offset

    def string(self, pos: int, what: str) -> None:
        self.need(pos, 4, 4, what)
        length = _u32(self.buf, pos)[0]
        self.need(pos + 4, length + 1, 1, what)
        if self.buf[pos + 4 + length] != 0:
            raise _Failed(f"{what} at byte {pos} is not NUL-terminated")
        self.spend_data(length, what)

    def vector(self, pos: int, elem_size: int, what: str) -> int:
        self.need(pos, 4, 4, what)
        length = _u32(self.buf, pos)[0]
        self.need(pos + 4, length * elem_size, 1, what)
        self.spend_data(length * elem_size, what)
        return length

    def table(self, pos: int, name: str, depth: int, follow: bool | None = None) -> None:
        if follow is None:
            follow = name not in self.shallow
        if depth > MAX_DEPTH:
            raise _Failed(f"{name} nested deeper than {MAX_DEPTH} tables")
        self.spend("tables")
        buf = self.buf
        self.need(pos, 4, 4, name)
        vtable = pos - _i32(buf, pos)[0]
        self.need(vtable, 4, 2, f"{name} vtable")
        vt_size, t_size = _u16(buf, vtable)[0], _u16(buf, vtable + 2)[0]
        if vt_size < 4 or vt_size & 1:
            raise _Failed(f"{name} vtable at byte {vtable} has size {vt_size}")
        self.need(vtable, vt_size, 2, f"{name} vtable")
        self.need(pos, t_size, 1, name)
        for field, voffset, kind, arg, required in self.tables[name]:
            offset = _u16(buf, vtable + voffset)[0] if voffset < vt_size else 0
            where = f"{name}.{field}"
            if offset == 0:
                if required:
                    raise _Failed(f"{where} is required but absent")
                continue
            if offset >= t_size:
                raise _Failed(f"{where} lies outside its table")
            if not follow and kind in _FOLLOWED:
                continue
            fpos = pos + offset
            if kind == "scalar":
                self.need(fpos, arg, arg, where)
            elif kind == "struct":
                self.need(fpos, arg[0], arg[1], where)
            elif kind == "string":
                self.string(self.follow(fpos, where), where)
            elif kind == "table":
                self.table(self.follow(fpos, where), arg, depth + 1)
            elif kind == "union":
                union, type_voffset = arg
                type_offset = _u16(buf, vtable + type_voffset)[0] if type_voffset < vt_size else 0
                member = self.unions[union].get(_u8(buf, pos + type_offset)[0]) if type_offset else None
                target = self.follow(fpos, where)
                if member is not None:
                    self.table(target, member, depth + 1)
            elif kind == "vscalar":
                self.vector(self.follow(fpos, where), arg, where)
            elif kind == "vstruct":
                start = self.follow(fpos, where)
                self.vector(start, arg[0], where)
            elif kind == "vstring":
                start = self.follow(fpos, where)
                for i in range(self.vector(start, 4, where)):
                    # Charged like tables: a vector of strings shared by many
                    # tables would otherwise be walked once per table.
                    self.spend("strings")
                    self.string(self.follow(start + 4 + 4 * i, where), where)
            elif kind == "vtable":
                start = self.follow(fpos, where)
                for i in range(self.vector(start, 4, where)):
                    self.table(self.follow(start + 4 + 4 * i, where), arg, depth + 1)


def verify_buffer(buf: memoryview, layout: ModuleType, *, error: type[PteError] = InvalidProgram,
                  shallow: frozenset[str] = frozenset(), root: int = 0) -> Verifier:
    """Raises ``error`` unless ``buf`` is a structurally valid buffer of ``layout``'s root table; tables of the
    types in ``shallow`` are checked but not followed (``Verifier.walk`` does that, later). The root offset is
    at byte ``root``: 4 in a size-prefixed buffer, whose fields are aligned counting the prefix."""
    verifier = Verifier(buf, layout, error, shallow)
    try:
        verifier.table(verifier.follow(root, "root offset"), layout.ROOT, 1)
    except _Failed as failed:
        raise error(f"{layout.ROOT.split('.')[-1]} verification failed: {failed}") from None
    return verifier
