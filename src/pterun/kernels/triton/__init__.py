"""Triton kernels for CUDA devices. Imported only when a CUDA method binds one, and only if Triton is there."""
