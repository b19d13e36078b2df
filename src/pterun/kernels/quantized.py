"""quantized_decomposed::* kernels (PT2E quantization). Filled in below."""

from pterun.kernels.registry import KernelRegistry


def register(registry: KernelRegistry) -> None:
    pass
