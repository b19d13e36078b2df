"""What memory a pointer really is, asked of the CUDA driver.

A tensor can claim to be on a GPU while its pointer is host memory (a third
party allocator, a wrapper that lies). Kernels would then fail far from the
cause, or read garbage on GPUs that cannot see pageable host memory. The
executor asks the driver once, when memory is bound to a CUDA-tagged slot,
as ExecuTorch's CUDA backend does with ``cudaPointerGetAttributes``.

Uses ``cuda-bindings`` when installed, else the driver library through ctypes.
"""

from __future__ import annotations

import ctypes
import functools

CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2
CU_POINTER_ATTRIBUTE_IS_MANAGED = 8
CU_MEMORYTYPE_HOST, CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_ARRAY, CU_MEMORYTYPE_UNIFIED = 1, 2, 3, 4


@functools.cache
def _query():
    try:
        from cuda.bindings import driver

        def query(attribute: int, ptr: int) -> tuple[int, int]:
            err, value = driver.cuPointerGetAttribute(driver.CUpointer_attribute(attribute), ptr)
            return int(err), int(value) if err == driver.CUresult.CUDA_SUCCESS else 0

        return query
    except ImportError:
        pass
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None

    def query(attribute: int, ptr: int) -> tuple[int, int]:
        value = ctypes.c_uint(0)
        err = libcuda.cuPointerGetAttribute(ctypes.byref(value), attribute, ctypes.c_uint64(ptr))
        return int(err), int(value.value)

    return query


def device_memory_kind(ptr: int) -> str:
    """"device", "managed", "pinned host", or "host" (memory the driver does not know: pageable)."""
    query = _query()
    if query is None:
        return "host"
    err, kind = query(CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr)
    if err != 0:
        return "host"
    err, managed = query(CU_POINTER_ATTRIBUTE_IS_MANAGED, ptr)
    if err == 0 and managed:
        return "managed"
    if kind == CU_MEMORYTYPE_DEVICE:
        return "device"
    if kind == CU_MEMORYTYPE_UNIFIED:
        return "managed"
    return "pinned host"
