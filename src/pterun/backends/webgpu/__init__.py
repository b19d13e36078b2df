"""VulkanBackend delegates on WebGPU (wgpu-py): what ExecuTorch's WebGPU and Vulkan partitioners lower.

Importing this package does not import wgpu; the device is created when the
first delegate is initialized. See backend.py.
"""

from pterun.backends.webgpu.backend import FUSE_SWIGLU, GPU_TIMESTAMPS, NAME, WebGPUBackend, WebGPUDelegate

__all__ = ["FUSE_SWIGLU", "GPU_TIMESTAMPS", "NAME", "WebGPUBackend", "WebGPUDelegate"]
