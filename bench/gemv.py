"""The one-row matrix-vector kernel alone, at the SwiGLU benchmark's shapes: achieved bandwidth.

    python bench/gemv.py      # on a CUDA machine with Triton
"""

from __future__ import annotations

import torch
import triton

from pterun.kernels.triton.gemv import gemv


def main() -> None:
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    copy_ms = triton.testing.do_bench(lambda: src.clone(), warmup=50, rep=300, return_mode="median")
    bandwidth = 2 * src.numel() / (copy_ms / 1e3)
    print(f"device-to-device copy: {bandwidth / 1e12:.2f} TB/s")
    for n, k in ((11008, 4096), (4096, 11008)):
        # Several weight sets in rotation, so the 50 MB L2 cannot hold the one being read.
        weights = [torch.randn(n, k, device="cuda").to(torch.bfloat16) for _ in range(4)]
        x = torch.randn(k, device="cuda").to(torch.bfloat16)
        out = torch.empty(n, device="cuda", dtype=torch.bfloat16)
        state = {"i": 0}

        def run():
            state["i"] = (state["i"] + 1) % len(weights)
            gemv(weights[state["i"]], x, out)

        run()
        ms = triton.testing.do_bench(run, warmup=50, rep=300, return_mode="median")
        nbytes = n * k * 2
        ms_torch = triton.testing.do_bench(lambda: torch.mv(weights[0], x), warmup=50, rep=300, return_mode="median")
        print(f"gemv {n}x{k} bf16: {ms * 1e3:.1f} µs, {nbytes / (ms / 1e3) / 1e12:.2f} TB/s "
              f"= {nbytes / (ms / 1e3) / bandwidth:.0%} of copy bandwidth; torch.mv {ms_torch * 1e3:.1f} µs")


if __name__ == "__main__":
    main()
