"""ExecuTorch's own CUDA backend (``CudaBackend``): AOTInductor-compiled libraries in the program, run
with PyTorch's runner for such libraries. backend.py says how a delegate loads; the blob's manifest
(manifest.py) and the library's image (elf.py) are read and checked before anything is loaded."""

from pterun.backends.aoti.backend import BACKEND_ID, CudaBackend, CudaDelegate

__all__ = ["BACKEND_ID", "CudaBackend", "CudaDelegate"]
