"""What this CPU's instruction sets decide: which of XNNPACK's kernels ExecuTorch's runtime runs here, and which
of PyTorch's integer products are exact and fast here.

Three facts differ between x86-64 CPUs, and all change results if ignored:

* **XNNPACK's 4-bit block kernels** (qd8_f32_qb4w, the 8da4w layers of LLM exports) sum in another float32
  order on each instruction set. XNNPACK picks them from the CPU's features (cpuinfo): with AVX-512 VNNI its
  unsigned-row kernels (``avx512vnni``: one accumulator per output, multiply then add at the end), else with
  AVX2 its ``avx2`` kernels (four partial accumulators per output, summed pairwise at the end, one fused
  multiply-add for the row scale and the bias). ``block_kernels`` names the family whose steps
  ``qblock.py`` repeats, so results equal ExecuTorch's on the same CPU.
* **PyTorch's int8 matrix products** are exact only where oneDNN runs them on VNNI (or AMX) instructions.
  Without VNNI, oneDNN multiplies u8 x s8 with ``vpmaddubsw``, whose 16-bit pair sums saturate (255 * 127 * 2
  > 32767): large activations times large weights come out wrong. ``torch._int_mm`` goes to oneDNN only
  where cpuinfo reports AVX-512 VNNI, else to a scalar loop (exact, and 20-50x slower than a float product).
  So integer products are used where the CPU has VNNI *and* a probe of each product with operands that
  saturate 16-bit pair sums comes out exact in this process (oneDNN honours ``ONEDNN_MAX_CPU_ISA``, which can
  take VNNI away from it although the CPU has it). Elsewhere quantized layers multiply their integers as
  floats (float32 where every partial sum stays below 2**24, else float64): exact, and on AVX2 faster than
  either integer product.
* **XNNPACK's float elementwise kernels** (sigmoid, reciprocal square root, square root, sin, cos, exp, tanh,
  gelu, log, hardswish, elu, softmax) are its own approximations, picked from the CPU's features too: with
  AVX-512F its ``avx512f`` kernels (a 32-entry table and scalef for sigmoid, rsqrt14 estimates), else with AVX2
  and FMA3 its ``avx2`` ones (polynomials, rsqrtps estimates). ``float_kernels`` names the family whose
  arithmetic pterun's native kernels repeat (``native/vunary.c``); elsewhere ("other") those nodes take
  PyTorch's functions, which round differently.

Everything is decided once per process, on first use (at a delegate's load), and said in ``summary``.
"""

from __future__ import annotations

import functools
import platform
from dataclasses import dataclass
from pathlib import Path

import torch

# Features by torch's names (torch.cpu.get_capabilities); /proc/cpuinfo spells some of them differently.
_PROC_NAMES = {
    "avx2": "avx2", "fma": "fma3", "avx512f": "avx512_f", "avx512bw": "avx512_bw", "avx512dq": "avx512_dq",
    "avx512vl": "avx512_vl", "avx512_vnni": "avx512_vnni", "avx_vnni": "avx_vnni", "amx_int8": "amx_int8",
}
_AVX512_VNNI = ("avx512_f", "avx512_bw", "avx512_dq", "avx512_vl", "avx512_vnni")


@dataclass(frozen=True)
class Cpu:
    """What this CPU decides (see the module's docstring)."""

    features: frozenset[str]
    block_kernels: str  # XNNPACK's qd8_f32_qb4w family ExecuTorch runs here: "avx512vnni", "avx2" or "other"
    int_mm: bool  # torch._int_mm multiplies int8 exactly, on oneDNN's VNNI kernels
    onednn: bool  # oneDNN's prepacked u8 x s8 product is exact, on VNNI kernels
    summary: str
    float_kernels: str = "other"  # XNNPACK's float elementwise family here: "avx512f", "avx2" or "other"

    @property
    def integer_products(self) -> bool:
        return self.int_mm or self.onednn


def features() -> frozenset[str]:
    """The CPU's instruction-set features, by torch's names ("avx2", "avx512_vnni", ...)."""
    capabilities = getattr(torch.cpu, "get_capabilities", None)
    if capabilities is not None:
        return frozenset(name for name, value in capabilities().items() if value is True)
    try:  # torch releases without get_capabilities: the kernel's list
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return frozenset(_PROC_NAMES[f] for f in flags if f in _PROC_NAMES)


def block_kernels(found: frozenset[str], machine: str) -> str:
    """The family of XNNPACK's 4-bit block kernels its runtime picks on a CPU with ``found`` features."""
    if machine not in ("x86_64", "AMD64"):
        return "other"
    if all(f in found for f in _AVX512_VNNI):
        return "avx512vnni"
    return "avx2" if "avx2" in found else "other"


def float_kernels(found: frozenset[str], machine: str) -> str:
    """The family of XNNPACK's float elementwise kernels its runtime picks on a CPU with ``found`` features."""
    if machine not in ("x86_64", "AMD64"):
        return "other"
    if "avx512_f" in found:
        return "avx512f"
    return "avx2" if {"avx2", "fma3"} <= found else "other"


def _probe(product) -> bool:
    """Whether ``product(x, w)`` (int8 [M, K] times int8 [N, K] -> int64 [M, N]) is exact on operands whose
    16-bit pair sums saturate: rows of 127 (255 once shifted to unsigned) times weights of 127 and of -128."""
    k = 64
    x = torch.full((4, k), 127, dtype=torch.int8)
    w = torch.cat([torch.full((8, k), 127, dtype=torch.int8), torch.full((8, k), -128, dtype=torch.int8)])
    expected = x.long() @ w.long().t()
    try:
        return bool(torch.equal(product(x, w), expected))
    except RuntimeError:  # a build without the op's kernel
        return False


def _int_mm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch._int_mm(x, w.contiguous().t()).long()


def _onednn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    m, n = x.shape[0], w.shape[0]
    out = torch.zeros(m, n)
    packed = torch.ops.onednn.qlinear_prepack(w, [m, x.shape[1]])
    torch.ops.onednn.qlinear_pointwise.binary(
        x.view(torch.uint8) ^ 128, 1.0, 128, packed, torch.ones(n), torch.zeros(n, dtype=torch.int64), out, None,
        1.0, 0, torch.float32, 1.0, 0, "sum", 1.0, "none", [], "")
    return out.long()


def onednn_available() -> bool:
    """Whether this torch has oneDNN's prepacked u8 x s8 product."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.onednn, "qlinear_pointwise")


def decide(found: frozenset[str], machine: str, int_mm_exact: bool, onednn_exact: bool) -> Cpu:
    """What a CPU with ``found`` features decides, given what the probes found (a pure function, for tests)."""
    kernels = block_kernels(found, machine)
    x86 = machine in ("x86_64", "AMD64")
    # torch runs _int_mm on oneDNN only with AVX-512 VNNI; oneDNN's own product also has AVX-VNNI kernels
    int_mm_vnni = "avx512_vnni" in found or not x86
    onednn_vnni = x86 and bool(found & {"avx512_vnni", "avx_vnni", "amx_int8"})
    int_mm, onednn = int_mm_vnni and int_mm_exact, onednn_vnni and onednn_exact
    names = [n for n in ("avx512_vnni", "amx_int8", "avx_vnni", "avx512_f", "avx2") if n in found]
    cpu = f"{machine} with {', '.join(names)}" if names else machine
    if int_mm or onednn:
        how = " and ".join(n for n, on in (("torch._int_mm", int_mm), ("oneDNN's u8 x s8 product", onednn)) if on)
        products = f"8-bit products multiply integers ({how}, exact here)"
    elif (int_mm_vnni and not int_mm_exact) or (onednn_vnni and not onednn_exact):
        products = ("8-bit products multiply integers as floats: PyTorch's integer products are not exact in "
                    "this process (oneDNN without VNNI: ONEDNN_MAX_CPU_ISA?)")
    else:
        products = ("8-bit products multiply integers as floats: without VNNI, PyTorch's integer products "
                    "saturate or run a scalar loop")
    floats = float_kernels(found, machine)
    elementwise = (f"float elementwise nodes in the arithmetic of XNNPACK's {floats} kernels" if floats != "other"
                   else "float elementwise nodes in PyTorch's arithmetic (XNNPACK's kernels here are not repeated)")
    return Cpu(found, kernels, int_mm, onednn,
               f"{cpu}: 4-bit block products in the order of XNNPACK's {kernels} kernels; {products}; {elementwise}",
               floats)


@functools.cache
def cpu() -> Cpu:
    """This CPU, as this process sees it (probed once)."""
    found, machine = features(), platform.machine()
    return decide(found, machine, _probe(_int_mm), onednn_available() and _probe(_onednn))
