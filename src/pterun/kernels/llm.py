"""LLM custom operators (llama::*). Filled in below."""

from pterun.kernels.registry import KernelRegistry


def register(registry: KernelRegistry) -> None:
    pass
