"""What pterun's Triton kernels (kernels/triton/, the XNNPACK backend's CUDA kernels) are compiled with.

Kernels that must round as PyTorch's separate operations round (a product, then a sum) are compiled with
``enable_fp_fusion=False``: Triton otherwise contracts a product and a sum into one fused multiply-add,
which rounds once. Triton's interpreter (``TRITON_INTERPRET=1``, for running kernels on a CPU) rounds every
operation anyway and takes no compile options.
"""

from __future__ import annotations

import os

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"  # kernels run by Triton's interpreter, which runs no PTX
NO_FUSION: dict[str, bool] = {} if INTERPRETED else {"enable_fp_fusion": False}
