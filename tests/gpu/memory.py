"""What the CUDA driver says a pointer is (the assertion behind every device-memory test)."""

import ctypes

CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2
CU_MEMORYTYPE_DEVICE = 2


def driver_memory_type(ptr: int) -> tuple[int, int]:
    """(status, memory type) from cuPointerGetAttribute: (0, 2) is device memory; pageable host memory
    is unknown to the driver and gives an error status."""
    memory_type = ctypes.c_uint(0)
    status = ctypes.CDLL("libcuda.so.1").cuPointerGetAttribute(
        ctypes.byref(memory_type), CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ctypes.c_uint64(ptr)
    )
    return status, memory_type.value
