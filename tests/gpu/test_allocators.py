"""The CUDA allocator on a real device, and the registry around it."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import pterun
from pterun.core.device import Device, DeviceType
from pterun.memory.pointer import device_memory_kind
from tests.gpu.memory import CU_MEMORYTYPE_DEVICE, driver_memory_type

pytestmark = pytest.mark.gpu


def test_importing_pterun_leaves_cuda_uninitialized():
    code = "import torch, pterun; pterun.Runtime.get(); print(torch.cuda.is_initialized())"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_cuda_allocator_gives_device_memory_on_the_asked_index():
    buffer = pterun.Runtime.get().allocators.allocate(1 << 20, Device(DeviceType.CUDA, 0))
    assert buffer.memory.device == torch.device("cuda", 0)
    assert driver_memory_type(buffer.data_ptr) == (0, CU_MEMORYTYPE_DEVICE)
    assert device_memory_kind(buffer.data_ptr) == "device"
    view = buffer.view(4096, 1024)
    assert view.data_ptr() == buffer.data_ptr + 4096
    buffer.copy_from_host(bytes(range(16)), offset=8)
    assert buffer.copy_to_host(8, 16) == bytes(range(16))


def test_pointer_kinds_seen_by_the_driver():
    assert device_memory_kind(torch.empty(16, device="cuda").data_ptr()) == "device"
    assert device_memory_kind(torch.empty(16).pin_memory().data_ptr()) == "pinned host"
    assert device_memory_kind(torch.empty(16).data_ptr()) == "host"
