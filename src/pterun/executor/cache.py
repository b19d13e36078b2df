"""The load cache: what loading a method derives and can keep between processes (docs/cache.md).

Two kinds of entry, each keyed by a SHA-256 of everything it depends on plus
pterun's, Python's and torch's versions:

* a method's compiled code: the marshalled code object of its generated
  source, keyed by that source itself, so an entry can only ever stand for
  the exact text that would have been compiled;
* a verification mark: these exact program bytes (and this method of them),
  or a delegate's flatbuffer, passed the verifier, keyed by their hash and
  what verified them.

Entries are written atomically (a temporary file, then ``os.replace``) and
checked when read: an entry whose checksum does not match is a miss, rebuilt
and written again. The directory must belong to the user and be writable by
no one else; otherwise the cache is off. Any error reading or writing it is a
miss, never a failed load.
"""

from __future__ import annotations

import hashlib
import importlib.util
import marshal
import os
import sys
import tempfile
import types
from pathlib import Path

import torch

from pterun.version import VERSION

ENV = "PTERUN_CACHE_DIR"  # a directory, or "off"
_MAGIC = b"pterunC1"
_CHECK = 32  # bytes of BLAKE2b checksum after the magic
_OFF = ("", "0", "off", "false", "no")


def _reader_digest() -> str:
    # What a verification mark vouches for is that these bytes passed *this* reader and verifier: the
    # format and flatbuffer layers' own source is part of every key, so a changed checker (a development
    # checkout, or a release that kept its version number) never trusts an older mark.
    package = Path(__file__).resolve().parent.parent
    h = hashlib.sha256()
    for path in sorted([*package.glob("format/**/*.py"), *package.glob("flatbuf/**/*.py")]):
        h.update(path.relative_to(package).as_posix().encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


_VERSIONS = "\0".join([VERSION, sys.version, importlib.util.MAGIC_NUMBER.hex(), torch.__version__,
                       _reader_digest()]).encode()


def default_directory() -> Path | None:
    """$PTERUN_CACHE_DIR, else $XDG_CACHE_HOME/pterun, else ~/.cache/pterun; None when turned off."""
    value = os.environ.get(ENV)
    if value is not None:
        return None if value.strip().lower() in _OFF else Path(value)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pterun"


class LoadCache:
    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory)
        self._usable: bool | None = None

    @staticmethod
    def from_option(option) -> LoadCache | None:
        """The cache a ``cache_dir`` load option asks for: None for the default, False for none, or a path."""
        if option is False:
            return None
        directory = default_directory() if option is None or option is True else Path(option)
        return None if directory is None else LoadCache(directory)

    # -- entries ---------------------------------------------------------------------------------------

    @staticmethod
    def key(*parts: bytes | str) -> str:
        h = hashlib.sha256(_VERSIONS)
        for part in parts:
            data = part.encode() if isinstance(part, str) else bytes(part)
            h.update(len(data).to_bytes(8, "little"))
            h.update(data)
        return h.hexdigest()

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / key

    def get(self, key: str) -> bytes | None:
        """The payload stored under ``key``; None if absent or damaged."""
        if not self._ready():
            return None
        try:
            blob = self._path(key).read_bytes()
        except OSError:
            return None
        payload = blob[len(_MAGIC) + _CHECK :]
        if blob[: len(_MAGIC)] != _MAGIC or blob[len(_MAGIC) : len(_MAGIC) + _CHECK] != _checksum(payload):
            return None
        return payload

    def put(self, key: str, payload: bytes) -> None:
        if not self._ready():
            return
        path = self._path(key)
        try:
            path.parent.mkdir(mode=0o700, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(_MAGIC + _checksum(payload) + payload)
                os.replace(tmp, path)
            except BaseException:
                os.unlink(tmp)
                raise
        except OSError:
            pass  # a cache that cannot be written is a cache that misses

    def _ready(self) -> bool:
        if self._usable is None:
            self._usable = _private_directory(self.directory)
        return self._usable

    # -- what is kept ----------------------------------------------------------------------------------

    def code(self, source: str, filename: str) -> types.CodeType:
        """``compile(source, filename, "exec")``, from the cache when it holds that source (the file name is
        part of the key: code keeps the name it was compiled under)."""
        key = self.key("code", filename, source)
        payload = self.get(key)
        if payload is not None:
            try:
                code = marshal.loads(payload)
            except (ValueError, EOFError, TypeError):
                code = None
            if isinstance(code, types.CodeType):
                return code
        code = compile(source, filename, "exec")
        self.put(key, marshal.dumps(code))
        return code

    def verified(self, key: str) -> bool:
        # A mark holds its own key: an entry put in its place (another mark, code) is no mark of these bytes.
        return self.get(key) == key.encode()

    def mark_verified(self, key: str) -> None:
        self.put(key, key.encode())


def _checksum(payload: bytes) -> bytes:
    return hashlib.blake2b(payload, digest_size=_CHECK).digest()


def _private_directory(directory: Path) -> bool:
    """Creates ``directory`` (for this user only) if needed; whether it is this user's and no one else can
    write to it. A directory others can write to could hand this process code to run."""
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = directory.stat()
    except OSError:
        return False
    if os.name != "posix":
        return True
    return st.st_uid == os.getuid() and not st.st_mode & 0o022
