"""Constant tensors: the blob's bytes as 32-bit GPU words, uploaded once at load."""

from __future__ import annotations

import math

import numpy as np

from pterun.backends.webgpu.device import Gpu
from pterun.backends.webgpu.graph import DType, TensorValue
from pterun.backends.webgpu.slots import CONST, Storage
from pterun.errors import InvalidProgram

# Bytes per element as the blob stores each type.
_WIDTH = {
    DType.FLOAT32: 4,
    DType.FLOAT16: 2,
    DType.INT32: 4,
    DType.BOOL: 1,
    DType.UINT8: 1,
    DType.INT8: 1,
    DType.FLOAT64: 8,
    DType.INT64: 8,
}
_RAW = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def words(data: memoryview, tv: TensorValue, vid: int) -> np.ndarray:
    """The constant's elements as the GPU holds them (see slots.ELEM): narrowed or widened to 32 bits."""
    n = math.prod(tv.dims)
    width = _WIDTH[tv.dtype]
    if len(data) < n * width:
        raise InvalidProgram(
            f"constant {tv.constant_id} has {len(data)} bytes; tensor {vid} "
            f"{list(tv.dims)} of {tv.dtype.name} needs {n * width}"
        )
    raw = np.frombuffer(data, dtype=_RAW[width], count=n)
    if tv.dtype == DType.INT8:
        return raw.view(np.int8).astype(np.int32)
    if width == 1:
        return raw.astype(np.uint32)
    if tv.dtype == DType.FLOAT16:
        return raw.view(np.float16).astype(np.float32)
    if tv.dtype == DType.FLOAT64:
        return raw.view(np.float64).astype(np.float32)
    if tv.dtype == DType.INT64:
        return raw.view(np.int64).astype(np.int32)
    return raw


def packed(data: memoryview, tv: TensorValue, vid: int) -> np.ndarray:
    """The constant's bytes as the file holds them, padded to whole 32-bit words."""
    nbytes = math.prod(tv.dims) * _WIDTH[tv.dtype]
    if len(data) < nbytes:
        raise InvalidProgram(
            f"constant {tv.constant_id} has {len(data)} bytes; tensor {vid} "
            f"{list(tv.dims)} of {tv.dtype.name} needs {nbytes}"
        )
    raw = np.zeros(-(-nbytes // 4) * 4, dtype=np.uint8)
    raw[:nbytes] = np.frombuffer(data, dtype=np.uint8, count=nbytes)
    return raw


def upload_bytes(gpu: Gpu, data: memoryview, tv: TensorValue, vid: int) -> Storage:
    host = packed(data, tv, vid)
    storage = Storage(host.size, CONST)
    storage.buffer = gpu.buffer(storage.nbytes, gpu.STORAGE, f"bytes{tv.constant_id}")
    if host.size:
        gpu.queue.write_buffer(storage.buffer, 0, host)
    return storage


def upload(gpu: Gpu, data: memoryview, tv: TensorValue, vid: int) -> Storage:
    host = words(data, tv, vid)
    storage = Storage(4 * host.size, CONST)
    storage.buffer = gpu.buffer(storage.nbytes, gpu.STORAGE, f"const{tv.constant_id}")
    if host.size:
        gpu.queue.write_buffer(storage.buffer, 0, np.ascontiguousarray(host))
    return storage
