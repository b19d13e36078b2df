"""Pages a load has finished reading go back to the system, without ever changing a byte (format/pages.py)."""

from __future__ import annotations

import mmap
import sys

import pytest

from pterun.format import pages
from pterun.format.source import read_source

PAGE = mmap.PAGESIZE
pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="pagemap is Linux's")


def resident_pages(data: memoryview, start: int, count: int) -> list[bool]:
    """Whether each of ``count`` pages of ``data`` from ``start`` is in this process's memory."""
    base = pages.address(data)
    with open("/proc/self/pagemap", "rb") as f:
        f.seek((base + start) // PAGE * 8)
        raw = f.read(8 * count)
    return [bool(int.from_bytes(raw[8 * i: 8 * i + 8], "little") & (1 << 63)) for i in range(count)]


@pytest.fixture
def mapped(tmp_path):
    content = bytes(range(256)) * (16 * PAGE // 256)
    path = tmp_path / "file.bin"
    path.write_bytes(content)
    file = read_source(path)
    assert isinstance(file.owner, mmap.mmap) and not file.data.readonly  # premise: a private file mapping
    bytes(file.data)  # every page read, so resident
    assert all(resident_pages(file.data, 0, 16))
    return file, content


def test_released_pages_leave_memory_and_read_back_the_same(mapped):
    file, content = mapped
    given = file.release(file.data[PAGE: 9 * PAGE])
    assert given == 8 * PAGE
    assert resident_pages(file.data, 0, 16) == [True] + [False] * 8 + [True] * 7
    assert bytes(file.data) == content


def test_only_whole_pages_inside_the_bytes_are_released(mapped):
    file, _ = mapped
    # From the middle of page 1 to the middle of page 4: pages 2 and 3 are the only whole ones.
    assert file.release(file.data[PAGE + 100: 4 * PAGE + 100]) == 2 * PAGE
    assert resident_pages(file.data, 0, 6) == [True, True, False, False, True, True]
    assert file.release(file.data[PAGE + 1: 2 * PAGE - 1]) == 0


def test_a_page_the_process_wrote_is_kept(mapped):
    file, content = mapped
    file.data[3 * PAGE + 5] = 0xAB  # a private copy of page 3 (a broken contract, but not a wrong value)
    assert file.release(file.data[:8 * PAGE]) == 7 * PAGE
    assert file.data[3 * PAGE + 5] == 0xAB
    assert bytes(file.data[: 3 * PAGE]) == content[: 3 * PAGE]


def test_bytes_not_mapped_from_a_file_are_left_alone(mapped, tmp_path):
    data = bytearray(8 * PAGE)
    data[100] = 7
    file = read_source(data)
    assert file.release(file.data) == 0
    assert data[100] == 7
    other, _ = mapped
    assert other.release(memoryview(data)) == 0  # not this file's bytes
    assert read_source(bytes(8 * PAGE)).release(memoryview(b"x" * PAGE)) == 0  # read-only
