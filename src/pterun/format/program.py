"""ProgramFile: a .pte file's methods, constants, segments and named data.

Loading checks the identifier and the extended header, verifies the flatbuffer
at the requested level, and locates every segment the program refers to, so
a file whose segments run past its end fails here rather than in a later call.
Methods are read lazily, one plan at a time, and cached.

Data comes back as ``memoryview`` slices of the file: nothing is copied.
"""

from __future__ import annotations

import enum
import hashlib
import struct
import threading

from pterun.errors import InvalidArgument, InvalidProgram, NotFound, PteError
from pterun.flatbuf.bulk import Bytes
from pterun.flatbuf.tables import vector_span
from pterun.flatbuf.verify import VerificationMarks, Verifier, verify_buffer
from pterun.format._generated import program_generated as fb
from pterun.format._generated import program_layout
from pterun.format.budget import charge, ints, read_budget, string
from pterun.format.header import HEADER_OFFSET, read_program_header
from pterun.format.plan import Plan
from pterun.format.plan_reader import read_plan
from pterun.format.source import FileBytes, Source, read_source

MAX_SUPPORTED_VERSION = 0
_PER_METHOD = frozenset({"pte.ExecutionPlan"})

# What a reader of a corrupt, unverified buffer can raise.
_READ_ERRORS = (struct.error, IndexError, ValueError, TypeError, OverflowError, UnicodeDecodeError, AttributeError)


class Verification(enum.IntEnum):
    """How much of a program is checked at load, as ExecuTorch's Program::Verification."""

    Minimal = 0
    InternalConsistency = 1


class ProgramFile:
    def __init__(self, source: Source, verification: Verification = Verification.InternalConsistency, *,
                 marks: VerificationMarks | None = None) -> None:
        self.file: FileBytes = read_source(source)
        data = self.file.data
        header = read_program_header(data)
        self.header = header
        self._program_bytes = data[: header.program_size]
        self._verifier: Verifier | None = None
        self._marks = marks
        self._digest: bytes | None = None
        self._verified: set[str] = set()  # methods whose tables passed the verifier
        self._verifying = threading.Lock()
        if verification == Verification.InternalConsistency:
            # Each method's tables are verified when it is loaded, as they are read (plan()).
            if not self._marked("program"):
                self._verify_root()
                self._mark("program")
        else:
            (root,) = struct.unpack_from("<I", data, 0)
            if not HEADER_OFFSET <= root <= header.program_size - 4:
                raise InvalidProgram(f"root table offset {root} is outside the {header.program_size}-byte program")
        self.verification = Verification(verification)
        try:
            self._root = fb.Program.GetRootAs(self._program_bytes, 0)
            with read_budget(len(self._program_bytes)):
                self._read_tables()
        except PteError:
            raise
        except _READ_ERRORS as exc:
            raise InvalidProgram(f"{self.file.name}: corrupt program ({type(exc).__name__}: {exc})") from None
        self._plans: dict[str, Plan] = {}

    # -- loading ---------------------------------------------------------------

    def _read_tables(self) -> None:
        root = self._root
        self.version = root.Version()
        if self.version > MAX_SUPPORTED_VERSION:
            raise InvalidProgram(
                f"program schema version is {self.version}; this runtime reads versions up to {MAX_SUPPORTED_VERSION}"
            )
        self.method_names: tuple[str, ...] = tuple(
            string(root.ExecutionPlan(i).Name()) or "" for i in range(charge(root.ExecutionPlanLength()))
        )
        self._segment_count = root.SegmentsLength()
        self._segments: dict[int, memoryview] = {}

        self._constant_segment: memoryview | None = None
        self._constant_offsets: tuple[int, ...] = ()
        cs = root.ConstantSegment()
        if cs is not None and cs.OffsetsLength() > 0:
            if root.ConstantBufferLength() > 0 and cs.OffsetsLength() > 1:
                raise InvalidProgram(
                    f"program has both {root.ConstantBufferLength()} inline constant buffers and a constant "
                    f"segment of {cs.OffsetsLength()} entries; only one may be used"
                )
            self._constant_offsets = ints(cs.OffsetsLength(), cs.OffsetsAsNumpy)
            if cs.OffsetsLength() > 1:
                self._constant_segment = self.segment(cs.SegmentIndex(), what="constant segment")
        self._inline_constants = root.ConstantBufferLength()

        self._mutable: list[tuple[memoryview, tuple[int, ...]]] = []
        for i in range(charge(root.MutableDataSegmentsLength())):
            ms = root.MutableDataSegments(i)
            offsets = ints(ms.OffsetsLength(), ms.OffsetsAsNumpy)
            self._mutable.append((self.segment(ms.SegmentIndex(), what="mutable data segment"), offsets))

        self.named_data: dict[str, memoryview] = {}
        for i in range(charge(root.NamedDataLength())):
            nd = root.NamedData(i)
            key = string(nd.Key()) or ""
            if key in self.named_data:
                raise InvalidProgram(f"named data key {key!r} appears twice")
            self.named_data[key] = self.segment(nd.SegmentIndex(), what=f"named data {key!r}")

    def _segment_view(self, index: int) -> memoryview:
        seg = self._root.Segments(index)
        base = self.header.segment_base_offset
        start, size = base + seg.Offset(), seg.Size()
        total = len(self.file.data)
        if size == 0:
            return self.file.data[0:0]
        if base == 0 or start + size > total:
            raise InvalidProgram(
                f"segment {index} spans bytes {start}..{start + size} of a {total}-byte file"
                + ("" if base else " that has no extended header")
            )
        return self.file.data[start : start + size]

    # -- verification --------------------------------------------------------------

    def _verify_root(self) -> None:
        self._verifier = verify_buffer(self._program_bytes, program_layout, shallow=_PER_METHOD)

    def _verify_method(self, name: str, pos: int) -> None:
        what = f"method {name}"
        with self._verifying:  # one walk per method, however many threads load it
            if name in self._verified:
                return
            if not self._marked(what):
                if self._verifier is None:
                    self._verify_root()  # the root was verified before, but its walk sets this one's bounds
                assert self._verifier is not None
                try:
                    self._verifier.walk(pos, "pte.ExecutionPlan", depth=2)
                except PteError as exc:
                    raise type(exc)(f"method {name!r}: {exc.message}") from None
                self._mark(what)
            self._verified.add(name)

    def _mark_key(self, what: str) -> str:
        # The exact bytes the verifier walks: the flatbuffer (segments are checked as they are used).
        if self._digest is None:
            self._digest = hashlib.sha256(self._program_bytes).digest()
        assert self._marks is not None  # asked only where marks are kept
        return self._marks.key("verified", self._digest, what)

    def _marked(self, what: str) -> bool:
        return self._marks is not None and self._marks.verified(self._mark_key(what))

    def _mark(self, what: str) -> None:
        if self._marks is not None:
            self._marks.mark_verified(self._mark_key(what))

    # -- access ------------------------------------------------------------------

    def segment(self, index: int, *, what: str = "segment") -> memoryview:
        """Segment ``index``, checked against the file when first used (as ExecuTorch loads them)."""
        view = self._segments.get(index)
        if view is None:
            if not 0 <= index < self._segment_count:
                raise InvalidProgram(f"{what} is segment {index}; the program has {self._segment_count} segments")
            try:
                view = self._segments[index] = self._segment_view(index)
            except _READ_ERRORS as exc:
                raise InvalidProgram(f"{what}: segment {index} is corrupt ({exc})") from None
        return view

    def plan(self, name: str) -> Plan:
        plan = self._plans.get(name)
        if plan is not None:
            return plan
        try:
            index = self.method_names.index(name)
        except ValueError:
            raise InvalidArgument(
                f"no method named {name!r} in the program; it has {', '.join(map(repr, self.method_names)) or 'none'}"
            ) from None
        pos = self._root.ExecutionPlan(index)._tab.Pos
        if self.verification == Verification.InternalConsistency and name not in self._verified:
            self._verify_method(name, pos)
        try:
            plan = read_plan(Bytes(self._program_bytes), pos)
        except PteError:
            raise
        except _READ_ERRORS as exc:
            raise InvalidProgram(f"method {name!r} is corrupt ({type(exc).__name__}: {exc})") from None
        self._plans[name] = plan
        return plan

    def constant(self, buffer_idx: int, nbytes: int) -> memoryview:
        """The bytes of constant tensor ``buffer_idx``, from the constant segment or the inline buffers."""
        if self._constant_segment is not None:
            if not 0 <= buffer_idx < len(self._constant_offsets):
                raise InvalidArgument(
                    f"constant {buffer_idx} is past the constant segment's {len(self._constant_offsets)} entries"
                )
            offset = self._constant_offsets[buffer_idx]
            segment = self._constant_segment
            if offset + nbytes > len(segment):
                raise InvalidArgument(
                    f"constant {buffer_idx}: {nbytes} bytes at offset {offset} overrun the "
                    f"{len(segment)}-byte constant segment"
                )
            return segment[offset : offset + nbytes]
        if not 0 <= buffer_idx < self._inline_constants:
            raise InvalidArgument(
                f"constant {buffer_idx} is past the program's {self._inline_constants} constant buffers"
            )
        what = f"constant buffer {buffer_idx}"
        storage = self._byte_vector(lambda: self._root.ConstantBuffer(buffer_idx), what, need=nbytes)
        return storage[:nbytes]

    def mutable_initial_value(self, buffer_idx: int, nbytes: int) -> memoryview:
        """The initial value of a planned tensor (always read from mutable data segment 0, as ExecuTorch does)."""
        if not self._mutable:
            raise NotFound(f"initial value {buffer_idx}: the program has no mutable data segments")
        segment, offsets = self._mutable[0]
        if not 0 <= buffer_idx < len(offsets):
            raise NotFound(f"initial value {buffer_idx} is past the mutable data segment's {len(offsets)} entries")
        offset = offsets[buffer_idx]
        if offset + nbytes > len(segment):
            raise InvalidArgument(
                f"initial value {buffer_idx}: {nbytes} bytes at offset {offset} overrun the "
                f"{len(segment)}-byte mutable data segment"
            )
        return segment[offset : offset + nbytes]

    def delegate_data(self, inline: bool, index: int) -> memoryview:
        if not inline:
            return self.segment(index, what="delegate data")

        def entry():
            count = self._root.BackendDelegateDataLength()
            if not 0 <= index < count:
                raise InvalidProgram(f"delegate data {index} is past the program's {count} inline blobs")
            return self._root.BackendDelegateData(index)

        return self._byte_vector(entry, f"inline delegate data {index}")

    def _byte_vector(self, table, what: str, need: int = 0) -> memoryview:
        """The byte vector that is the first field of ``table()``, at least ``need`` bytes long. Read where
        first needed, so that an unverified program fails cleanly here too."""
        try:
            start, length = vector_span(table())
        except _READ_ERRORS as exc:
            raise InvalidProgram(f"{what} is corrupt ({exc})") from None
        if need > length:
            raise InvalidArgument(f"{what} needs {need} bytes; its buffer holds {length}")
        # Verified programs cannot get here with bytes outside the flatbuffer; unverified ones can.
        if start + length > len(self._program_bytes):
            raise InvalidProgram(
                f"{what} spans bytes {start}..{start + length} of a {len(self._program_bytes)}-byte program"
            )
        return self._program_bytes[start : start + length]
