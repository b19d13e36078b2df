"""The delegate's generated code and its blob's verification are kept in the executor's load cache
(docs/cache.md) like a method's."""

from __future__ import annotations

import hashlib

import pytest
import torch

import pterun
from pterun.backends.interface import BackendInitContext
from pterun.backends.xnnpack import XnnpackBackend, compiler
from pterun.backends.xnnpack import blob as blob_module
from pterun.errors import DelegateInvalidCompatibility
from pterun.executor import cache as cache_module
from pterun.executor.cache import LoadCache
from pterun.format import ProgramFile
from tests.backends.xnnpack.test_xnnpack_packed import _export, _inputs


def test_a_second_load_compiles_no_delegate_code(tmp_path, monkeypatch):
    exported = _export()
    runtime = pterun.Runtime.get()
    first = runtime.load_program(exported.pte, cache_dir=tmp_path).load_method("forward")
    assert first.delegate_handles and all(d.source for d in first.delegate_handles)
    expected = first.execute(_inputs(0))

    def refused(*args, **kwargs):
        raise AssertionError("compile ran")

    for module in (compiler, cache_module):  # a module-level name shadows the builtin
        monkeypatch.setattr(module, "compile", refused, raising=False)
    second = runtime.load_program(exported.pte, cache_dir=tmp_path).load_method("forward")
    actual = second.execute(_inputs(0))
    assert len(actual) == len(expected) and all(torch.equal(a, e) for a, e in zip(actual, expected))


def _walks(monkeypatch) -> list:
    """The blobs the verifier walks from here on."""
    walks: list = []
    original = blob_module.verify_buffer
    monkeypatch.setattr(blob_module, "verify_buffer", lambda *a, **k: walks.append(a) or original(*a, **k))
    return walks


def _load(pte, cache_dir) -> None:
    pterun.Runtime.get().load_program(pte, cache_dir=cache_dir).load_method("forward")


def test_a_second_load_verifies_no_blob(tmp_path, monkeypatch):
    exported = _export()
    walks = _walks(monkeypatch)
    _load(exported.pte, False)  # no cache: every blob walked, no marks
    _load(exported.pte, tmp_path)
    assert len(walks) == 2 * len(_blobs(exported.pte))
    walks.clear()
    _load(exported.pte, tmp_path)
    assert walks == []


def _blobs(pte) -> list[bytes]:
    program = ProgramFile(pte)
    return [bytes(program.delegate_data(d.inline, d.index)) for d in program.plan("forward").delegates]


def _blob_mark(cache: LoadCache, blob: bytes):
    flatbuffer = blob_module.split_blob(memoryview(blob)).flatbuffer
    key = cache.key("xnnpack verified", hashlib.sha256(flatbuffer).digest(), blob_module._verifier_digest())
    return cache._path(key)


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty", "code", "another mark"])
def test_a_damaged_blob_mark_is_a_miss(tmp_path, monkeypatch, damage):
    exported = _export()
    _load(exported.pte, tmp_path)
    cache = LoadCache(tmp_path)
    mark = _blob_mark(cache, _blobs(exported.pte)[0])
    entry = mark.read_bytes()
    if damage == "truncate":
        mark.write_bytes(entry[: len(entry) // 2])
    elif damage == "flip":
        mark.write_bytes(entry[:-1] + bytes([entry[-1] ^ 0x40]))
    elif damage == "empty":
        mark.write_bytes(b"")
    else:  # a whole entry, its checksum right, of something else: the program's mark, or code
        marks = damage == "another mark"
        other = next(p for p in tmp_path.rglob("*")
                     if p.is_file() and p != mark and (cache.get(p.name) == p.name.encode()) == marks)
        mark.write_bytes(other.read_bytes())
    walks = _walks(monkeypatch)
    _load(exported.pte, tmp_path)
    assert len(walks) == 1  # the blob whose mark was damaged
    assert mark.read_bytes() == entry  # written again


def test_a_blob_that_fails_verification_is_never_marked(tmp_path):
    exported = _export()
    blob = bytearray(_blobs(exported.pte)[0])
    assert blob[4:8] == blob_module.HEADER_MAGIC
    blob[32:36] = (0xFFFFFF00).to_bytes(4, "little")  # the flatbuffer's root offset, past its end
    context = BackendInitContext(method_name="forward", named_data=ProgramFile(exported.pte).named_data,
                                 marks=LoadCache(tmp_path))
    for _ in range(2):
        with pytest.raises(DelegateInvalidCompatibility, match="verification failed"):
            XnnpackBackend().init(context, memoryview(bytes(blob)), ())
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]
