"""Where a file's offsets, lengths, indices and sizes are: the fields a reader follows or trusts.

The walk follows the schema layouts generated with the readers (``TABLES``,
``UNIONS``, ``ROOT``), so every table, vector and scalar of a valid file is
found and named ("pte.Tensor.sizes[]", "header.program_size", ...). Tests use
the map to mutate a file exactly where a field is.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Field:
    name: str  # "pte.Tensor.sizes[]", "pte.DataSegment.size", "header.program_size", ...
    pos: int
    size: int


@dataclass
class StructureMap:
    """Positions of everything a reader follows or trusts in one (valid) file."""

    length: int
    fields: list[Field] = field(default_factory=list)  # scalars and scalar vector elements
    offsets: list[int] = field(default_factory=list)  # 4-byte uoffsets and table soffsets
    vtable_entries: list[int] = field(default_factory=list)  # 2-byte vtable slots
    lengths: list[int] = field(default_factory=list)  # 4-byte vector and string lengths
    boundaries: set[int] = field(default_factory=set)

    def named(self, *prefixes: str) -> list[Field]:
        return [f for f in self.fields if f.name.startswith(prefixes)]


def walk_flatbuffer(data: bytes, layout, m: StructureMap) -> None:
    def u16(p):
        return struct.unpack_from("<H", data, p)[0]

    def u32(p):
        return struct.unpack_from("<I", data, p)[0]

    def i32(p):
        return struct.unpack_from("<i", data, p)[0]

    seen: set[int] = set()

    def follow(pos: int) -> int:
        m.offsets.append(pos)
        return pos + u32(pos)

    def vector(pos: int, elem: int, name: str | None) -> int:
        n = u32(pos)
        m.lengths.append(pos)
        m.boundaries.update((pos, pos + 4, pos + 4 + n * elem))
        if name is not None:
            m.fields.extend(Field(name, pos + 4 + i * elem, elem) for i in range(n))
        return n

    def table(pos: int, name: str) -> None:
        if pos in seen:
            return
        seen.add(pos)
        m.offsets.append(pos)
        vt = pos - i32(pos)
        vt_size, t_size = u16(vt), u16(vt + 2)
        m.vtable_entries.extend(range(vt, vt + vt_size, 2))
        m.boundaries.update((pos, pos + t_size, vt, vt + vt_size))
        for fname, voffset, kind, arg, _ in layout.TABLES[name]:
            off = u16(vt + voffset) if voffset < vt_size else 0
            if not off:
                continue
            fpos = pos + off
            where = f"{name}.{fname}"
            if kind == "scalar":
                m.fields.append(Field(where, fpos, arg))
            elif kind == "string":
                vector(follow(fpos), 1, None)
            elif kind == "table":
                table(follow(fpos), arg)
            elif kind == "union":
                union, type_voffset = arg
                member = layout.UNIONS[union].get(data[pos + u16(vt + type_voffset)])
                target = follow(fpos)
                if member:
                    table(target, member)
            elif kind == "vscalar":
                vector(follow(fpos), arg, f"{where}[]")
            elif kind == "vtable" or kind == "vstring":
                start = follow(fpos)
                for i in range(vector(start, 4, None)):
                    target = follow(start + 4 + 4 * i)
                    if kind == "vtable":
                        table(target, arg)
                    else:
                        vector(target, 1, None)

    table(follow(0), layout.ROOT)


def map_program(data: bytes) -> StructureMap:
    from pterun.format._generated import program_generated as fb
    from pterun.format._generated import program_layout
    from pterun.format.header import read_program_header

    m = StructureMap(len(data))
    header = read_program_header(memoryview(data))
    m.boundaries.update((0, 4, 8, 12, 16, header.program_size, len(data)))
    if data[8:12] == b"eh00":
        (hlen,) = struct.unpack_from("<I", data, 12)
        m.fields.append(Field("header.length", 12, 4))
        names = ["program_size", "segment_base_offset", "segment_data_size"]
        for i, name in enumerate(names[: (hlen - 8) // 8]):
            m.fields.append(Field(f"header.{name}", 16 + 8 * i, 8))
        m.boundaries.update((16, 24, 32, 8 + hlen))
    walk_flatbuffer(data[: header.program_size], program_layout, m)
    root = fb.Program.GetRootAs(data, 0)
    for i in range(root.SegmentsLength()):
        seg = root.Segments(i)
        start = header.segment_base_offset + seg.Offset()
        m.boundaries.update((start, start + seg.Size()))
    m.boundaries = {b for b in m.boundaries if 0 <= b <= len(data)}
    return m


def map_data_file(data: bytes) -> StructureMap:
    from pterun.format._generated import flat_tensor_generated as fb
    from pterun.format._generated import flat_tensor_layout
    from pterun.format.header import read_data_header

    m = StructureMap(len(data))
    header = read_data_header(memoryview(data))
    m.fields.append(Field("header.length", 12, 4))
    for i, name in enumerate(["flatbuffer_offset", "flatbuffer_size", "segment_base_offset", "segment_data_size"]):
        m.fields.append(Field(f"header.{name}", 16 + 8 * i, 8))
    m.boundaries.update(range(0, 49, 4))
    end = header.flatbuffer_offset + header.flatbuffer_size
    walk_flatbuffer(data[:end], flat_tensor_layout, m)
    root = fb.FlatTensor.GetRootAs(data, 0)
    for i in range(root.SegmentsLength()):
        seg = root.Segments(i)
        start = header.segment_base_offset + seg.Offset()
        m.boundaries.update((start, start + seg.Size()))
    m.boundaries.update((end, len(data)))
    m.boundaries = {b for b in m.boundaries if 0 <= b <= len(data)}
    return m


def map_xnnpack_blobs(pte: bytes, methods: list[str] | None = None) -> tuple[list[Field], list[tuple]]:
    """The fields of every XNNPACK blob of ``methods`` (all by default), at their positions in the .pte,
    and (number of values, number of external values) of each blob's graph."""
    from pterun.backends.xnnpack._generated import xnngraph_generated as xfb
    from pterun.backends.xnnpack._generated import xnngraph_layout
    from pterun.backends.xnnpack.blob import split_blob
    from pterun.format import ProgramFile

    program = ProgramFile(pte)
    found: list[Field] = []
    counts = []
    for name in program.method_names if methods is None else methods:
        for d in program.plan(name).delegates:
            if d.backend_id != "XnnpackBackend":
                continue
            blob = bytes(program.delegate_data(d.inline, d.index))
            flatbuffer = bytes(split_blob(memoryview(blob)).flatbuffer)
            at = pte.find(blob) + blob.find(flatbuffer)
            m = StructureMap(len(flatbuffer))
            walk_flatbuffer(flatbuffer, xnngraph_layout, m)
            found += [Field(f.name, at + f.pos, f.size) for f in m.fields]
            root = xfb.XNNGraph.GetRootAs(flatbuffer, 0)
            counts.append((root.XvaluesLength(), root.NumExterns()))
    return found, counts
