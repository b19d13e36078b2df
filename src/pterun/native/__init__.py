"""pterun's native kernels: C sources (native.h says what each promises) and the extension ``_kernels`` that
setup.py builds from them, one small library on Python's stable ABI that links no torch and is called with data
pointers. XNNPACK's arithmetic (quantized products, converts, float elementwise kernels) for the XNNPACK
delegate (``backends/xnnpack/nodes/native.py``), ExecuTorch's float32 attention over a KV cache
(``sdpa.c``) for ``llama::custom_sdpa`` (``kernels/llm/attention.py``), and the float32 RMSNorm and rotary chains
the executor fuses, in PyTorch's rounding (``fused.c``, for ``kernels/fused.py``).

Optional: where the extension was not built (no C compiler at install time) ``kernels`` is None, ``missing`` says
why, and every caller takes its PyTorch path."""

from __future__ import annotations

from types import ModuleType

kernels: ModuleType | None
try:
    from pterun.native import _kernels as kernels
except ImportError as exc:  # not built: the PyTorch paths take every kernel
    kernels = None
    missing = f"pterun's native kernels are not built ({exc})"
else:
    missing = ""

ISAS = {"portable": 0, "avx2": 1, "avx512vnni": 2}  # native.h's pn_isa, by name
