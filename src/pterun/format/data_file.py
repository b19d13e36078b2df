"""DataFile: the named tensors of a .ptd (FlatTensor) file."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from pterun.enums import ELEMENT_SIZE
from pterun.errors import InvalidExternalData, NotFound, PteError
from pterun.flatbuf.verify import verify_buffer
from pterun.format._generated import flat_tensor_generated as fb
from pterun.format._generated import flat_tensor_layout
from pterun.format.header import read_data_header
from pterun.format.source import FileBytes, Source, read_source

MAX_SUPPORTED_VERSION = 0


@dataclass(frozen=True, slots=True)
class TensorLayout:
    scalar_type: int
    sizes: tuple[int, ...]
    dim_order: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        n = ELEMENT_SIZE.get(self.scalar_type, 1)
        for s in self.sizes:
            n *= s
        return n


@dataclass(frozen=True, slots=True)
class NamedEntry:
    data: memoryview  # the whole segment the key names
    layout: TensorLayout | None


def _check_layout(key: str, layout: TensorLayout, available: int) -> None:
    """The segment holds all of the tensor its layout describes: readers take nbytes from it unchecked.

    Other inconsistencies (an unknown scalar type, a bad dim order) are found
    when a program asks for the tensor and its layout does not match.
    """
    if layout.scalar_type in ELEMENT_SIZE and all(s >= 0 for s in layout.sizes) and layout.nbytes > available:
        raise InvalidExternalData(
            f"tensor {key!r} is {layout.nbytes} bytes ({list(layout.sizes)}); its segment holds {available}"
        )


class DataFile:
    """Named data of a .ptd file. Keys are looked up by exact match; data is never copied."""

    def __init__(self, source: Source) -> None:
        self.file: FileBytes = read_source(source, what="data file")
        data = self.file.data
        header = read_data_header(data)
        flatbuffer = data[: header.flatbuffer_offset + header.flatbuffer_size]
        verify_buffer(flatbuffer, flat_tensor_layout, error=InvalidExternalData)
        try:
            root = fb.FlatTensor.GetRootAs(flatbuffer, 0)
            if root.Version() > MAX_SUPPORTED_VERSION:
                raise InvalidExternalData(
                    f"data file schema version is {root.Version()}; this runtime reads up to {MAX_SUPPORTED_VERSION}"
                )
            if root.SegmentsIsNone() or root.NamedDataIsNone():
                raise InvalidExternalData("data file has no segments or no named data")
            segments = []
            for i in range(root.SegmentsLength()):
                seg = root.Segments(i)
                start, size = header.segment_base_offset + seg.Offset(), seg.Size()
                if start + size > len(data):
                    raise InvalidExternalData(
                        f"segment {i} spans bytes {start}..{start + size} of a {len(data)}-byte file"
                    )
                segments.append(data[start : start + size])
            self.entries: dict[str, NamedEntry] = {}
            for i in range(root.NamedDataLength()):
                nd = root.NamedData(i)
                key = (nd.Key() or b"").decode()
                index = nd.SegmentIndex()
                if index >= len(segments):
                    raise InvalidExternalData(f"key {key!r} names segment {index}; the file has {len(segments)}")
                layout = None
                tl = nd.TensorLayout()
                if tl is not None:
                    layout = TensorLayout(
                        tl.ScalarType(),
                        tuple(int(x) for x in tl.SizesAsNumpy()) if tl.SizesLength() else (),
                        tuple(int(x) for x in tl.DimOrderAsNumpy()) if tl.DimOrderLength() else (),
                    )
                    _check_layout(key, layout, len(segments[index]))
                self.entries.setdefault(key, NamedEntry(segments[index], layout))
        except PteError:
            raise
        except (struct.error, IndexError, ValueError, TypeError, OverflowError, UnicodeDecodeError,
                AttributeError) as exc:
            raise InvalidExternalData(f"{self.file.name}: corrupt data file ({type(exc).__name__}: {exc})") from None

    def keys(self) -> list[str]:
        return list(self.entries)

    def get(self, key: str) -> NamedEntry:
        entry = self.entries.get(key)
        if entry is None:
            raise NotFound(f"key {key!r} is not in data file {self.file.name}")
        return entry
