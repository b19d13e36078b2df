"""Dense files: every field written, so that a mutation can reach fields left at their default.

FlatBuffers leaves a scalar equal to its default out of the file, and the
exporter leaves out tables it has nothing to say in (a tensor's
ExtraTensorInfo). A value that is absent cannot be mutated, so programs
are also fuzzed re-encoded with every scalar written and those tables
present. All defaults in the format are zero, and an empty
ExtraTensorInfo means what an absent one does, so the dense file is the
same program.
"""

from __future__ import annotations

import struct

_EMPTY_TABLES = ("pte.ExtraTensorInfo",)


def _reencode(data: bytes, layout, identifier: bytes) -> bytes:
    import flatbuffers
    import numpy as np

    def u16(p):
        return struct.unpack_from("<H", data, p)[0]

    def u32(p):
        return struct.unpack_from("<I", data, p)[0]

    def i32(p):
        return struct.unpack_from("<i", data, p)[0]

    def follow(p):
        return p + u32(p)

    b = flatbuffers.Builder(4 * len(data))
    b.ForceDefaults(True)
    made: dict[tuple, int] = {}
    slot_setters = {1: b.PrependUint8Slot, 2: b.PrependUint16Slot, 4: b.PrependUint32Slot, 8: b.PrependUint64Slot}

    def slots(name: str) -> int:
        return max((voffset - 4) // 2 + 1 for _, voffset, *_ in layout.TABLES[name]) if layout.TABLES[name] else 0

    def string(pos: int) -> int:
        key = ("s", pos)
        if key not in made:
            made[key] = b.CreateString(data[pos + 4 : pos + 4 + u32(pos)])
        return made[key]

    def offsets_vector(offsets: list[int]) -> int:
        b.StartVector(4, len(offsets), 4)
        for off in reversed(offsets):
            b.PrependUOffsetTRelative(off)
        return b.EndVector()

    def table(pos: int | None, name: str) -> int:
        key = ("t", pos, name)
        if pos is not None and key in made:
            return made[key]
        fields = layout.TABLES[name]
        vt = pos - i32(pos) if pos is not None else None
        vt_size = u16(vt) if vt is not None else 0
        present = {}
        for fname, voffset, _kind, _arg, _ in fields:
            off = u16(vt + voffset) if voffset < vt_size else 0
            present[fname] = pos + off if off else None
        children = {}
        for fname, _voffset, kind, arg, _ in fields:
            fpos = present[fname]
            if kind == "table" and fpos is None and arg in _EMPTY_TABLES:
                children[fname] = table(None, arg)
            if fpos is None or kind in ("scalar", "struct"):
                continue
            if kind == "string":
                children[fname] = string(follow(fpos))
            elif kind == "table":
                children[fname] = table(follow(fpos), arg)
            elif kind == "union":
                union, type_voffset = arg
                type_name = next(f for f, v, *_ in fields if v == type_voffset)
                member = layout.UNIONS[union].get(data[present[type_name]]) if present[type_name] else None
                if member:
                    children[fname] = table(follow(fpos), member)
            elif kind == "vscalar":
                start = follow(fpos)
                raw = data[start + 4 : start + 4 + u32(start) * arg]
                children[fname] = b.CreateNumpyVector(np.frombuffer(raw, dtype=f"<u{arg}"))
            elif kind in ("vtable", "vstring"):
                start = follow(fpos)
                items = [follow(start + 4 + 4 * i) for i in range(u32(start))]
                made_items = [table(t, arg) if kind == "vtable" else string(t) for t in items]
                children[fname] = offsets_vector(made_items)
        b.StartObject(slots(name))
        for fname, voffset, kind, arg, _ in sorted(fields, key=lambda f: -(f[3] if f[2] == "scalar" else 4)):
            slot = (voffset - 4) // 2
            if kind == "scalar":
                fpos = present[fname]
                value = int.from_bytes(data[fpos : fpos + arg], "little") if fpos is not None else 0
                slot_setters[arg](slot, value, 0)
            elif fname in children:
                b.PrependUOffsetTRelativeSlot(slot, children[fname], 0)
        made_table = b.EndObject()
        if pos is not None:
            made[key] = made_table
        return made_table

    root = table(follow(0), layout.ROOT)
    b.Finish(root, file_identifier=identifier)
    return bytes(b.Output())


def _align(n: int, to: int) -> int:
    return -(-n // to) * to


def dense_program(data: bytes) -> bytes:
    from pterun.format._generated import program_layout
    from pterun.format.header import read_program_header
    from tests.format.build import insert_header

    header = read_program_header(memoryview(data))
    flatbuffer = _reencode(data[: header.program_size], program_layout, b"ET12")
    if not header.segment_base_offset:
        return flatbuffer
    segments = data[header.segment_base_offset :]
    program_size = len(flatbuffer) + 32
    base = _align(program_size, 128)
    eh = b"eh00" + struct.pack("<IQQQ", 32, program_size, base, len(segments))
    out = insert_header(flatbuffer, eh)
    return out + bytes(base - len(out)) + segments


def dense_data_file(data: bytes) -> bytes:
    from pterun.format._generated import flat_tensor_layout
    from pterun.format.header import read_data_header
    from tests.format.build import insert_header

    header = read_data_header(memoryview(data))
    flatbuffer = _reencode(data[: header.flatbuffer_offset + header.flatbuffer_size], flat_tensor_layout, b"FT01")
    segments = data[header.segment_base_offset :]
    total = len(flatbuffer) + 40
    base = _align(total, 128)
    fh = b"FH01" + struct.pack("<IQQQQ", 40, 48, total - 48, base, len(segments))
    out = insert_header(flatbuffer, fh)
    return out + bytes(base - len(out)) + segments
