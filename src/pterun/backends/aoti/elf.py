"""What a shared library image is, read from its bytes before anything loads it.

A ``CudaBackend`` delegate's library is an ELF shared object that AOTInductor compiled: host code for
this machine's processor, the GPU kernels embedded as CUDA fat binaries (machine code for some GPU
architectures, and PTX that the driver can compile for newer ones), and undefined references to the
C functions of PyTorch's AOTInductor shim (``aoti_torch_*``), the CUDA runtime and the driver.

``read_library`` checks the ELF headers and tables it reads against the image's size and returns the
dynamic symbols and the kernels' architectures, so that a blob which is no library, one built for
another processor, or one whose kernels no GPU here can run fails with a typed error before the
dynamic loader sees it. Pure Python: no torch, no devices.
"""

from __future__ import annotations

import platform
import struct
import sys
from dataclasses import dataclass

from pterun.errors import DelegateInvalidCompatibility

ET_DYN = 3
SHT_DYNSYM, SHT_DYNAMIC = 11, 6
DT_NEEDED = 1
STB_WEAK = 2
SHN_UNDEF = 0
# e_machine of the processors a library can be built for, by platform.machine()'s name.
MACHINES = {"x86_64": 62, "amd64": 62, "aarch64": 183, "arm64": 183, "ppc64le": 21}
MACHINE_NAMES = {62: "x86-64", 183: "AArch64", 21: "PowerPC64", 3: "x86", 40: "ARM", 190: "CUDA"}

FATBIN_MAGIC = 0xBA55ED50
FATBIN_PTX, FATBIN_SASS = 1, 2
_ELF_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")
_SECTION = struct.Struct("<IIQQQQIIQQ")
_SYMBOL = struct.Struct("<IBBHQQ")
_FATBIN = struct.Struct("<IHHQ")
_FATBIN_ENTRY = struct.Struct("<HHIQIIII")


@dataclass(frozen=True)
class Kernel:
    """One image of a fat binary: machine code (SASS) or PTX for ``sm`` (major * 10 + minor)."""

    ptx: bool
    sm: int

    def runs_on(self, sm: int) -> bool:
        # Machine code runs on the architecture it was built for and later minor versions of the same major
        # one; PTX is compiled by the driver for its own architecture or any later one.
        if self.ptx:
            return self.sm <= sm
        return self.sm // 10 == sm // 10 and self.sm <= sm

    def __str__(self) -> str:
        return f"sm_{self.sm} {'PTX' if self.ptx else 'SASS'}"


@dataclass(frozen=True)
class Library:
    needed: tuple[str, ...]  # DT_NEEDED entries
    defined: frozenset[str]  # dynamic symbols it exports
    undefined: frozenset[str]  # dynamic symbols it needs (weak ones left out)
    kernels: frozenset[frozenset[Kernel]]  # per embedded fat binary (one per GPU kernel), its images

    def check_runs_on(self, sm: int) -> None:
        """``DelegateInvalidCompatibility`` unless every fat binary has an image a GPU of ``sm`` runs."""
        for images in self.kernels:
            if any(k.runs_on(sm) for k in images):
                continue
            built = ", ".join(sorted(map(str, images)))
            raise DelegateInvalidCompatibility(
                f"its GPU kernels were built for {built}; this GPU is sm_{sm}, which runs none of them "
                "(export the program on a machine with this GPU)"
            )


def host_machine() -> int | None:
    return MACHINES.get(platform.machine().lower())


def read_library(image: bytes | memoryview, machine: int | None = None) -> Library:
    """The library in ``image``, checked to be a 64-bit shared object for ``machine`` (this processor's by
    default); ``DelegateInvalidCompatibility`` otherwise."""
    data = memoryview(image).cast("B")
    size = len(data)
    if size < _ELF_HEADER.size or bytes(data[:4]) != b"\x7fELF":
        raise DelegateInvalidCompatibility(f"its library is not an ELF shared object; it starts "
                                           f"{bytes(data[:8])!r}")
    (ident, e_type, e_machine, _, _, _, shoff, _, _, _, _, shentsize, shnum, _) = _ELF_HEADER.unpack_from(data, 0)
    if ident[4] != 2 or ident[5] != 1:
        raise DelegateInvalidCompatibility("its library is not a 64-bit little-endian ELF image")
    if sys.byteorder != "little":  # pragma: no cover - pterun runs on little-endian machines
        raise DelegateInvalidCompatibility("this machine is big-endian")
    if e_type != ET_DYN:
        raise DelegateInvalidCompatibility(f"its library is an ELF image of type {e_type}, not a shared "
                                           "object (3)")
    expected = host_machine() if machine is None else machine
    if expected is not None and e_machine != expected:
        raise DelegateInvalidCompatibility(
            f"its library is built for {MACHINE_NAMES.get(e_machine, f'machine {e_machine}')}; this "
            f"machine is {MACHINE_NAMES.get(expected, platform.machine())}"
        )
    if shentsize != _SECTION.size or shoff > size or shnum * shentsize > size - shoff:
        raise DelegateInvalidCompatibility(f"its library's section table lies outside its "
                                           f"{size} bytes")
    sections = [_SECTION.unpack_from(data, shoff + i * shentsize) for i in range(shnum)]

    def section_bytes(index: int) -> memoryview:
        if not 0 <= index < len(sections):
            raise DelegateInvalidCompatibility(f"its library links to section {index}, which it lacks")
        _, _, _, _, offset, length, *_ = sections[index]
        if offset > size or length > size - offset:
            raise DelegateInvalidCompatibility(f"a section of its library lies outside its {size} bytes")
        return data[offset : offset + length]

    def text(table: memoryview, at: int) -> str:
        end = bytes(table[at:]).find(b"\0") if at < len(table) else -1
        if end < 0:
            raise DelegateInvalidCompatibility("a name in its library runs past its string table")
        return bytes(table[at : at + end]).decode("ascii", "replace")

    defined: set[str] = set()
    undefined: set[str] = set()
    needed: list[str] = []
    found_symbols = False
    for index, (_, kind, _, _, _, _, link, _, _, entsize) in enumerate(sections):
        if kind == SHT_DYNSYM:
            found_symbols = True
            symbols, names = section_bytes(index), section_bytes(link)
            if entsize != _SYMBOL.size:
                raise DelegateInvalidCompatibility(f"its library's symbols are {entsize} bytes each")
            for at in range(_SYMBOL.size, len(symbols) - _SYMBOL.size + 1, _SYMBOL.size):
                name, info, _, shndx, _, _ = _SYMBOL.unpack_from(symbols, at)
                if not name:
                    continue
                if shndx == SHN_UNDEF:
                    if info >> 4 != STB_WEAK:
                        undefined.add(text(names, name))
                else:
                    defined.add(text(names, name))
        elif kind == SHT_DYNAMIC:
            dynamic, names = section_bytes(index), section_bytes(link)
            for at in range(0, len(dynamic) - 15, 16):
                tag, value = struct.unpack_from("<qQ", dynamic, at)
                if tag == DT_NEEDED:
                    needed.append(text(names, value))
    if not found_symbols:
        raise DelegateInvalidCompatibility("its library has no dynamic symbol table")
    return Library(tuple(needed), frozenset(defined), frozenset(undefined), frozenset(_kernels(data)))


def _kernels(data: memoryview) -> set[frozenset[Kernel]]:
    """The images of each CUDA fat binary embedded in ``data`` (AOTInductor embeds one per kernel)."""
    raw = data.obj if isinstance(data.obj, bytes) else bytes(data)
    magic = struct.pack("<I", FATBIN_MAGIC)
    kernels: set[frozenset[Kernel]] = set()
    at = raw.find(magic)
    while at >= 0:
        images: set[Kernel] = set()
        if at + _FATBIN.size <= len(raw):
            _, _, header, fat_size = _FATBIN.unpack_from(raw, at)
            entry, end = at + header, min(at + header + fat_size, len(raw))
            while entry + _FATBIN_ENTRY.size <= end:
                kind, _, entry_header, padded, _, _, _, sm = _FATBIN_ENTRY.unpack_from(raw, entry)
                if kind in (FATBIN_PTX, FATBIN_SASS) and 10 <= sm < 1000:
                    images.add(Kernel(kind == FATBIN_PTX, sm))
                if entry_header == 0:
                    break
                entry += entry_header + padded
        if images:
            kernels.add(frozenset(images))
        at = raw.find(magic, at + 4)
    return kernels
