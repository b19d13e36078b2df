"""Giving back the pages of a memory-mapped file that a load has finished reading.

A backend that packs weights into a layout of its own (XNNPACK's) reads the file's bytes once and never
again; ExecuTorch frees those buffers after packing (its ``FreeableBuffer``), which unmaps them. pterun's
file is one private mapping (``format/source.py``), so the equivalent is ``madvise(MADV_DONTNEED)`` on the
pages those bytes fill: the process's resident memory drops by them, the kernel's page cache keeps them,
and a later read maps them again from the file.

On a private mapping, MADV_DONTNEED would also discard a page the process wrote (its copy-on-write copy),
bringing back the file's bytes. Nothing writes a program's constants, but a release must never turn a
contract broken elsewhere into a silently wrong value, so the pages are checked first in
``/proc/self/pagemap``: a page present in memory but not backed by the file (bit 61 clear) is a private copy
and stays. Where pagemap cannot be read (another system), nothing is released.
"""

from __future__ import annotations

import ctypes
import mmap
import os
from array import array

PAGE = mmap.PAGESIZE
_PRESENT, _SWAPPED, _FILE = 1 << 63, 1 << 62, 1 << 61


def address(view: memoryview) -> int | None:
    """The address of a writable, non-empty buffer's first byte; None for a read-only or empty one."""
    if view.readonly or not view.nbytes:
        return None
    return ctypes.addressof(ctypes.c_char.from_buffer(view))


def release(mapping: mmap.mmap, start: int, length: int) -> int:
    """Drops this process's copy of the file pages lying wholly inside ``mapping[start : start + length]``
    (pages the process wrote stay); returns how many bytes were given back."""
    first = -(-start // PAGE) * PAGE
    end = (start + length) // PAGE * PAGE
    if end <= first or not hasattr(mmap, "MADV_DONTNEED"):
        return 0
    base = address(memoryview(mapping))
    if base is None:
        return 0
    kept = _written_pages(base + first, (end - first) // PAGE)
    if kept is None:
        return 0
    released, run = 0, first
    for page in (*kept, (end - first) // PAGE):
        stop = first + page * PAGE
        if stop > run:
            mapping.madvise(mmap.MADV_DONTNEED, run, stop - run)
            released += stop - run
        run = stop + PAGE
    return released


def _written_pages(address: int, count: int) -> list[int] | None:
    """Indices (from ``address``, page-aligned) of the ``count`` pages that are in memory as private copies
    rather than file pages; None if pagemap cannot tell."""
    entries = array("Q")
    try:
        fd = os.open("/proc/self/pagemap", os.O_RDONLY)
    except OSError:
        return None
    try:
        raw = os.pread(fd, 8 * count, address // PAGE * 8)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(raw) != 8 * count:
        return None
    entries.frombytes(raw)
    return [i for i, e in enumerate(entries) if e & (_PRESENT | _SWAPPED) and not e & _FILE]
