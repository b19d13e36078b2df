"""The XnnpackBackend delegate blob: header, graph flatbuffer, constant data.

The header (``XH00``) is the one ExecuTorch's delegates share (:mod:`pterun.backends.blob`).
Blobs from before the header existed are a bare flatbuffer with constants
inside it (``constant_buffer``); bytes 4-8 then hold the file identifier, so
the magic tells the two apart.

Everything here is checked before anything is trusted: a blob that fails
raises a :class:`~pterun.errors.PteError`, never a reader's exception.
"""

from __future__ import annotations

import functools
import hashlib
import sys
from dataclasses import dataclass
from pathlib import Path

from pterun.backends import blob as blob_header
from pterun.backends.blob import split_header
from pterun.backends.xnnpack._generated import xnngraph_layout
from pterun.errors import DelegateInvalidCompatibility
from pterun.flatbuf.verify import VerificationMarks, verify_buffer

HEADER_MAGIC = b"XH00"
IDENTIFIERS = (b"XN00", b"XN01")


@dataclass(frozen=True)
class Blob:
    flatbuffer: memoryview
    constants: memoryview | None  # None: a bare flatbuffer, constants live inside it


def split_blob(processed: memoryview, marks: VerificationMarks | None = None) -> Blob:
    """Locates the flatbuffer and constant region of a blob and verifies the flatbuffer, unless ``marks`` says
    these exact bytes passed this verifier before."""
    data = memoryview(processed).cast("B")
    size = len(data)
    if size < 8:
        raise DelegateInvalidCompatibility(f"XNNPACK blob is {size} bytes; too short to hold a graph")
    if bytes(data[4:8]) == HEADER_MAGIC:
        flatbuffer, constants = split_header(data, "XNNPACK", exact=False)
    else:
        flatbuffer, constants = data, None
    identifier = bytes(flatbuffer[4:8])
    if identifier not in IDENTIFIERS:
        raise DelegateInvalidCompatibility(
            f"XNNPACK graph identifier is {identifier!r}; this runtime reads "
            f"{' and '.join(repr(i) for i in IDENTIFIERS)}"
        )
    # The FlatBuffers Python reader follows offsets blindly; only a verified buffer is safe to read.
    if marks is None:
        verify_buffer(flatbuffer, xnngraph_layout, error=DelegateInvalidCompatibility)
    else:
        key = marks.key("xnnpack verified", hashlib.sha256(flatbuffer).digest(), _verifier_digest())
        if not marks.verified(key):
            verify_buffer(flatbuffer, xnngraph_layout, error=DelegateInvalidCompatibility)
            marks.mark_verified(key)
    return Blob(flatbuffer, constants)


@functools.cache
def _verifier_digest() -> bytes:
    # A mark vouches that these bytes passed *this* check: the layout tables the verifier walks and the checks
    # of this module and the header's are part of its key (the verifier's own source is in every key).
    h = hashlib.sha256()
    for module in (sys.modules[__name__], blob_header, xnngraph_layout):
        h.update(Path(module.__file__ or "").read_bytes())
    return h.digest()
