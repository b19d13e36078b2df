"""The load cache (docs/cache.md): compiled code and verification marks kept between loads, checked when read.

Every test passes its own cache directory; none reads the environment's."""

from __future__ import annotations

import linecache
import os
import stat
import threading

import pytest
import torch

import pterun
from pterun.errors import InvalidProgram
from pterun.executor import cache as cache_module
from pterun.executor.cache import LoadCache
from pterun.format import program as program_module
from pterun.sourcecode import _lines
from tests.format import build
from tests.format.test_lazy_verification import _two_methods_second_corrupt

X = torch.tensor([10.0, 20.0])
EXPECTED = torch.tensor([11.0, 22.0])


def _program() -> bytes:
    """forward(x) = x + [1, 2]."""
    return build.program([build.add_constant(build.Tensor(data_buffer_idx=1))],
                         constant_buffers=[b"", build.floats(1, 2)])


def _run(data: bytes, cache_dir) -> pterun.Method:
    method = pterun.Runtime.get().load_program(data, cache_dir=cache_dir).load_method("forward")
    (y,) = method.execute([X])
    assert torch.equal(y, EXPECTED)
    return method


def _entries(directory) -> list:
    return sorted(p for p in directory.rglob("*") if p.is_file())


def _refuse(monkeypatch, module, name: str) -> None:
    def refused(*args, **kwargs):
        raise AssertionError(f"{name} ran")

    monkeypatch.setattr(module, name, refused, raising=False)  # a module-level name shadows a builtin


def test_a_second_load_takes_the_code_and_the_verification_from_the_cache(tmp_path, monkeypatch):
    data = _program()
    _run(data, tmp_path)
    assert len(_entries(tmp_path)) == 3  # the method's code; the program's and the method's verification marks
    _refuse(monkeypatch, cache_module, "compile")
    _refuse(monkeypatch, program_module, "verify_buffer")
    method = _run(data, tmp_path)
    # The code from the cache carries the name its lines are kept under, so that errors map back to them.
    assert "".join(linecache.getlines(method.code.__code__.co_filename)) == method.source
    assert len(_entries(tmp_path)) == 3


def test_other_bytes_miss(tmp_path, monkeypatch):
    _run(_program(), tmp_path)
    other = _program().replace(b"forward", b"forwarD")  # the same program, a method of another name
    original, calls = program_module.verify_buffer, []
    monkeypatch.setattr(program_module, "verify_buffer", lambda *a, **k: calls.append(a) or original(*a, **k))
    pterun.Runtime.get().load_program(other, cache_dir=tmp_path).load_method("forwarD")
    assert calls, "bytes never verified were taken as verified"


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty"])
def test_a_damaged_entry_is_rebuilt(tmp_path, damage):
    data = _program()
    _run(data, tmp_path)
    entries = _entries(tmp_path)
    for p in entries:
        blob = p.read_bytes()
        if damage == "truncate":
            p.write_bytes(blob[: len(blob) // 2])
        elif damage == "flip":
            p.write_bytes(blob[:-1] + bytes([blob[-1] ^ 0x40]))  # the payload's last byte, or the checksum's
        else:
            p.write_bytes(b"")
    cache = LoadCache(tmp_path)
    assert all(cache.get(p.name) is None for p in entries)  # the premise: every entry reads as damaged
    _run(data, tmp_path)
    assert _entries(tmp_path) == entries
    assert all(cache.get(p.name) is not None for p in entries)  # rebuilt


def test_a_damaged_code_entry_never_runs(tmp_path):
    data = _program()
    _run(data, tmp_path)
    cache = LoadCache(tmp_path)
    code_entries = [p for p in _entries(tmp_path) if cache.get(p.name) != p.name.encode()]  # a mark holds its key
    assert len(code_entries) == 1
    (entry,) = code_entries
    blob = bytearray(entry.read_bytes())
    blob[-8:] = b"\xff" * 8  # still a checksum of the old payload: read as damaged, not unmarshalled
    entry.write_bytes(bytes(blob))
    assert cache.get(entry.name) is None
    _run(data, tmp_path)


def test_off_reads_and_writes_nothing(monkeypatch):
    _refuse(monkeypatch, LoadCache, "get")
    _refuse(monkeypatch, LoadCache, "put")
    _run(_program(), False)
    assert LoadCache.from_option(False) is None


def test_a_directory_others_can_write_to_is_not_used(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    _run(_program(), shared)
    assert _entries(shared) == []
    os.chmod(shared, stat.S_IRWXU)
    _run(_program(), shared)
    assert _entries(shared)


def test_a_corrupt_method_is_never_marked_verified(tmp_path):
    data = _two_methods_second_corrupt()
    for _ in range(2):
        program = pterun.Runtime.get().load_program(data, cache_dir=tmp_path)
        with pytest.raises(InvalidProgram, match="method 'broken': Program verification failed"):
            program.load_method("broken")
        (y,) = program.load_method("forward").execute([X])
        assert torch.equal(y, EXPECTED)


def test_a_function_that_dies_while_its_name_is_being_held_does_not_wait(tmp_path):
    """The collector may run a generated function's finalizer inside another load's hold of the lock."""
    method = _run(_program(), tmp_path)
    filename = method.code.__code__.co_filename
    with _lines._lock:
        released = threading.Thread(target=_lines._release, args=("<no such function>",))
        released.start()
        released.join(timeout=10)
        finished = not released.is_alive()
    released.join()
    assert finished, "a finalizer waited for the lock"
    _run(_program(), tmp_path)  # the next load settles what was noted
    assert filename in linecache.cache  # the method still lives: its lines stay
