"""Programs with a ``CudaBackend`` delegate as ExecuTorch's CUDA export lays them out, made on any machine.

The real thing comes from ExecuTorch's CUDA backend on a CUDA machine (scripts/export-et-cuda.py); these
are for the checks that come before anything is loaded: the blob is ExecuTorch's own weight manifest
(its encoder, ``encode_cuda_weight_metadata``), the library a small ELF shared object written here
(header, dynamic symbols, DT_NEEDED entries, embedded CUDA fat binaries), the weights named data in a
.ptd, and the delegate's inputs and outputs planned in a CUDA-tagged arena, as the export plans them.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from tests.format import build

LIBRARY_KEY = "0" * 64 + "_so_blob"
CONTAINER_API = ("AOTInductorModelContainerCreateWithDevice", "AOTInductorModelContainerRun",
                 "AOTInductorModelContainerDelete")
X86_64, AARCH64 = 62, 183


def fatbin(*images: tuple[bool, int]) -> bytes:
    """A CUDA fat binary of (PTX?, sm) images, each with a few payload bytes."""
    entries = b""
    for ptx, sm in images:
        payload = b"\0" * 16
        head = struct.pack("<HHIQIIII", 1 if ptx else 2, 0x101, 64, len(payload), 0, len(payload), 0, sm)
        entries += head.ljust(64, b"\0") + payload
    return struct.pack("<IHHQ", 0xBA55ED50, 1, 16, len(entries)) + entries


def elf_library(*, machine: int = X86_64, defined=CONTAINER_API, undefined=("aoti_torch_empty_strided",),
                needed=("libcuda.so.1",), kernels: tuple[tuple[bool, int], ...] = ((False, 90), (True, 90)),
                elf_type: int = 3) -> bytes:
    """A 64-bit little-endian ELF image with the dynamic symbols and DT_NEEDED entries given."""
    strings = bytearray(b"\0")

    def name(text: str) -> int:
        at = len(strings)
        strings.extend(text.encode() + b"\0")
        return at

    symbols = bytes(24)  # the null symbol
    for n in defined:
        symbols += struct.pack("<IBBHQQ", name(n), (1 << 4) | 2, 0, 4, 0, 0)
    for n in undefined:
        symbols += struct.pack("<IBBHQQ", name(n), (1 << 4) | 2, 0, 0, 0, 0)
    dynamic = b"".join(struct.pack("<qQ", 1, name(n)) for n in needed) + struct.pack("<qQ", 0, 0)
    data = fatbin(*kernels) if kernels else b"\0" * 16
    # Sections: null, .dynstr (1), .dynsym (2), .dynamic (3), .data (4).
    body, offsets = b"", []
    for part in (bytes(strings), symbols, dynamic, data):
        offsets.append(64 + len(body))
        body += part + bytes(-len(part) % 8)
    shoff = 64 + len(body)
    sections = bytes(64)
    for kind, index, entsize, link in ((3, 0, 0, 0), (11, 1, 24, 1), (6, 2, 16, 1), (1, 3, 0, 0)):
        part = (bytes(strings), symbols, dynamic, data)[index]
        sections += struct.pack("<IIQQQQIIQQ", 0, kind, 0, 0, offsets[index], len(part), link, 0, 8, entsize)
    header = struct.pack("<16sHHIQQQIHHHHHH", b"\x7fELF\x02\x01\x01" + bytes(9), elf_type, machine, 1, 0, 0,
                         shoff, 0, 64, 56, 0, 64, 5, 0)
    return header + body + sections


@dataclass
class WeightSpec:
    fqn: str = "lin.weight"
    sizes: tuple[int, ...] = (2, 2)
    dtype: int = 6  # Float
    storage: bytes = field(default_factory=lambda: struct.pack("<4f", 1, 2, 3, 4))
    stored_nbytes: int | None = None  # what the manifest says the storage holds; default its length
    key: str | None = None


def manifest(weights: list[WeightSpec], library_key: str = LIBRARY_KEY) -> bytes:
    """The delegate's blob, written by ExecuTorch's own encoder."""
    from executorch.backends.cuda.cuda_weight_collector import CudaWeightEntry, encode_cuda_weight_metadata

    entries = []
    for w in weights:
        strides, step = [], 1
        for size in reversed(w.sizes):
            strides.insert(0, step)
            step *= size
        entries.append(CudaWeightEntry(
            fqn=w.fqn, storage_key=w.key or f"cuda_fqn_weight:cuda:{w.fqn}",
            storage_nbytes=len(w.storage) if w.stored_nbytes is None else w.stored_nbytes, dtype=w.dtype,
            device_type=1, storage_offset=0, sizes=tuple(w.sizes), strides=tuple(strides)))
    return encode_cuda_weight_metadata(library_key, entries)


def program(*, blob: bytes | None = None, library: bytes | None = None, library_key: str = LIBRARY_KEY,
            weights: list[WeightSpec] | None = None, arena: int = 16,
            target_device: bytes = b"cuda:0") -> tuple[bytes, bytes]:
    """(.pte, .ptd): ``forward(x: float[2]) -> float[2]`` through one CudaBackend delegate, its I/O in a
    CUDA-tagged arena of ``arena`` bytes, and a delegate-free ``plain`` method (identity on the host)."""
    weights = [WeightSpec()] if weights is None else weights
    blob = manifest(weights, library_key) if blob is None else blob
    library = elf_library() if library is None else library
    forward = build.Plan(
        values=[build.Tensor(memory=(1, 0), device=(1, 0)), build.Tensor(memory=(1, 8), device=(1, 0))],
        inputs=[0], outputs=[1], instructions=[("delegate", 0, [0, 1])],
        delegates=[("CudaBackend", 0, 0, {"method_name": b"forward", "target_device": target_device})],
        buffer_sizes=[0, arena], buffer_devices=[(1, 1, 0)],
    )
    plain = build.identity(name="plain")
    pte = build.program([forward, plain], delegate_data=[blob], segments=[library],
                        named=[(LIBRARY_KEY, 0)])
    ptd = build.data_file([(w.key or f"cuda_fqn_weight:cuda:{w.fqn}", w.storage, None) for w in weights])
    return pte, ptd
