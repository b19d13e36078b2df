"""Bytes of a file, from a path (memory-mapped), a bytes-like object or a file object."""

from __future__ import annotations

import io
import mmap
import os
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Union

from pterun.errors import AccessFailed, InvalidArgument
from pterun.format import pages

Source = Union[str, os.PathLike, bytes, bytearray, memoryview, BinaryIO, "FileBytes"]


@dataclass(frozen=True)
class FileBytes:
    """A file's bytes and the object that keeps them alive.

    ``data`` is writable for memory-mapped files (a private copy-on-write
    mapping: nothing is copied until written, and writes never reach the file),
    so tensors can view it without a copy. For ``bytes`` it is read-only.
    """

    data: memoryview
    name: str
    owner: object = None

    def release(self, view: memoryview) -> int:
        """Gives back this process's pages of ``view``, bytes of ``data`` a load has finished with
        (``format/pages.py``); bytes not mapped from a file, or not in ``data``, are left alone. Returns the
        bytes given back."""
        if isinstance(self.owner, FileBytes):
            return self.owner.release(view)
        if not isinstance(self.owner, mmap.mmap):
            return 0
        start, base = pages.address(view), pages.address(memoryview(self.owner))
        if start is None or base is None or not 0 <= start - base <= len(self.owner) - view.nbytes:
            return 0
        return pages.release(self.owner, start - base, view.nbytes)


def read_source(source: Source, *, what: str = "program file") -> FileBytes:
    """The bytes of ``source``; ``what`` names it in errors ("program file", "data file")."""
    if isinstance(source, FileBytes):
        return source
    if isinstance(source, (str, os.PathLike)):
        return _map(Path(source), what)
    if isinstance(source, (bytes, bytearray, memoryview)):
        view = memoryview(source)
        if view.ndim != 1 or view.itemsize != 1:
            view = view.cast("B")
        return FileBytes(view, f"<{type(source).__name__} {view.nbytes} bytes>", source)
    if hasattr(source, "read"):
        return _read(source, what)
    raise InvalidArgument(
        f"cannot read a {what} from a {type(source).__name__}; expected a path, bytes or a binary file object"
    )


def _read(source, what: str) -> FileBytes:
    name = getattr(source, "name", None)
    name = "<file object>" if name is None else str(name)
    text = f"{what} {name!r} is open in text mode; open it in binary mode ('rb')"
    if isinstance(source, io.TextIOBase):
        raise InvalidArgument(text)
    try:
        content = source.read()
    except (OSError, ValueError) as exc:
        raise AccessFailed(f"cannot read {what} {name!r}: {exc}") from None
    if isinstance(content, str):
        raise InvalidArgument(text)
    try:
        data = bytearray(content)
    except TypeError:
        raise InvalidArgument(
            f"{what} {name!r}: read() gave a {type(content).__name__}, not bytes; pass a binary file object"
        ) from None
    return FileBytes(memoryview(data), name, data)


def _map(path: Path, what: str) -> FileBytes:
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size == 0:
                return FileBytes(memoryview(b""), str(path))
            mapping = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    except FileNotFoundError:
        raise AccessFailed(f"{what} {str(path)!r} does not exist") from None
    except IsADirectoryError:
        raise AccessFailed(f"{what} {str(path)!r} is a directory") from None
    except (OSError, ValueError, io.UnsupportedOperation) as exc:
        raise AccessFailed(f"cannot read {what} {str(path)!r}: {exc}") from None
    return FileBytes(memoryview(mapping), str(path), mapping)
