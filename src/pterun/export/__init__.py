"""Export side: partitioners that make ExecuTorch's exporter write programs for pterun's delegates.

Needs ExecuTorch (``pip install 'pterun[export]'``); the runtime never imports this package.
"""

from pterun.export.cuda import (
    BACKEND_ID,
    CudaPartitioner,
    PterunCudaBackend,
    device_resident_config,
    device_resident_options,
)

__all__ = [
    "BACKEND_ID", "CudaPartitioner", "PterunCudaBackend", "device_resident_config", "device_resident_options",
]
