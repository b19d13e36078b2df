"""What a ``CudaBackend`` delegate's blob says: where its library and weights are in the named data.

ExecuTorch's CUDA backend keeps the compiled library and the weights in the program's named data (the
library usually in the .pte, the weights in ``aoti_cuda_blob.ptd``) and writes, as the delegate's blob,
only where to find them. ExecuTorch 1.5 writes a manifest (``cuda_weight_collector.py``), all
little-endian::

    "ETCUDAFQN3"
    string    the library's named-data key ("<sha256>_so_blob")
    u32       the number of weights, then per weight:
      string  its fully qualified name in the model ("c.weight"), which the library names it by
      string  the named-data key of its storage ("cuda_fqn_weight:cuda:c.weight")
      u64     the storage's size in bytes
      i32     its dtype (ScalarType)        i32  its device (0 CPU, 1 CUDA)
      i64     its offset in the storage, in elements
      u32     its rank, then its sizes (i64 each) and its strides (i64 each)

where a string is a u32 length and that many UTF-8 bytes. Earlier exports wrote
``"<library key>\\n<weights key>"`` (one dense weights blob) or nothing at all (keys made of the method
name); those are recognized, and refused by the backend, which cannot load a dense blob.

Everything is checked here, before anything is loaded: a blob that ends early, sizes that do not fit
their storage, a rank or count no model has.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from pterun.errors import InvalidProgram

MAGIC = b"ETCUDAFQN3"
CPU, CUDA = 0, 1

# Bytes per element of the dtypes AOTInductor's constants have (ScalarType codes).
ITEM_SIZES = {0: 1, 1: 1, 2: 2, 3: 4, 4: 8, 5: 2, 6: 4, 7: 8, 11: 1, 15: 2, 23: 1, 24: 1}
_MAX_RANK = 64
_MAX_WEIGHTS = 1 << 20


@dataclass(frozen=True)
class Weight:
    fqn: str
    key: str  # named-data key of its storage
    nbytes: int  # the storage's size
    dtype: int  # ScalarType code
    device: int  # CPU or CUDA
    offset: int  # in elements
    sizes: tuple[int, ...]
    strides: tuple[int, ...]

    @property
    def needed(self) -> int:
        """Bytes of its storage the view reaches."""
        if any(s == 0 for s in self.sizes):
            return 0
        last = self.offset + sum((n - 1) * s for n, s in zip(self.sizes, self.strides))
        return (last + 1) * ITEM_SIZES[self.dtype]


@dataclass(frozen=True)
class Manifest:
    library: str  # named-data key of the shared library
    weights: tuple[Weight, ...]
    dense_weights: str | None = None  # an older export's single weights blob (not loadable)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.at = data, 0

    def take(self, fmt: str) -> tuple:
        size = struct.calcsize(fmt)
        if self.at + size > len(self.data):
            raise InvalidProgram(f"the manifest ends at byte {len(self.data)}, inside a field at "
                                 f"byte {self.at}")
        values = struct.unpack_from(fmt, self.data, self.at)
        self.at += size
        return values

    def string(self, what: str) -> str:
        (length,) = self.take("<I")
        if self.at + length > len(self.data):
            raise InvalidProgram(f"{what} is {length} bytes, past the manifest's end")
        raw = self.data[self.at : self.at + length]
        self.at += length
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidProgram(f"{what} is not UTF-8 text") from None


def read_manifest(processed: memoryview | bytes, method_name: str) -> Manifest:
    """The manifest in a delegate's blob (``InvalidProgram`` when it is malformed)."""
    data = bytes(processed)
    if not data:  # exports before named keys: the keys follow from the method's name
        prefix = f"{method_name}_" if method_name else ""
        return Manifest(f"{prefix}so_blob", (), dense_weights=f"{prefix}weights_blob")
    if not data.startswith(MAGIC):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            text = ""
        library, newline, dense = text.partition("\n")
        if not newline or not library or not dense or "\n" in dense:
            raise InvalidProgram(f"the blob is neither ExecuTorch's weight manifest ({MAGIC.decode()}) "
                                 f"nor a pair of named-data keys; it starts {data[:16]!r}")
        return Manifest(library, (), dense_weights=dense)
    reader = _Reader(data)
    reader.at = len(MAGIC)
    library = reader.string("the library's key")
    if not library:
        raise InvalidProgram("the manifest names no library")
    (count,) = reader.take("<I")
    if count > _MAX_WEIGHTS:
        raise InvalidProgram(f"the manifest lists {count} weights")
    weights: list[Weight] = []
    seen: set[str] = set()
    for i in range(count):
        fqn = reader.string(f"weight {i}'s name")
        key = reader.string(f"weight {fqn!r}'s key")
        nbytes, dtype, device, offset, rank = reader.take("<QiiqI")
        if rank > _MAX_RANK:
            raise InvalidProgram(f"weight {fqn!r} has rank {rank}")
        sizes = reader.take(f"<{rank}q")
        strides = reader.take(f"<{rank}q")
        weight = Weight(fqn, key, nbytes, dtype, device, offset, sizes, strides)
        _check(weight)
        if fqn in seen:
            raise InvalidProgram(f"weight {fqn!r} is listed twice")
        seen.add(fqn)
        weights.append(weight)
    if reader.at != len(data):
        raise InvalidProgram(f"{len(data) - reader.at} bytes follow the manifest's last weight")
    return Manifest(library, tuple(weights))


def _check(w: Weight) -> None:
    name = f"weight {w.fqn!r}"
    if not w.fqn or not w.key:
        raise InvalidProgram("a weight has an empty name or key")
    if w.dtype not in ITEM_SIZES:
        raise InvalidProgram(f"{name} has dtype {w.dtype}, which no AOTInductor constant has")
    if w.device not in (CPU, CUDA):
        raise InvalidProgram(f"{name} is on device type {w.device}; expected 0 (CPU) or 1 (CUDA)")
    if w.offset < 0 or any(n < 0 for n in w.sizes) or any(s < 0 for s in w.strides):
        raise InvalidProgram(f"{name} has a negative offset, size or stride")
    if w.needed > w.nbytes:
        raise InvalidProgram(f"{name} ({list(w.sizes)}, strides {list(w.strides)}, offset {w.offset}) reaches "
                             f"{w.needed} bytes of its {w.nbytes}-byte storage")
