"""On the GPU, replaying a method allocates nothing from PyTorch's caching allocator."""

from __future__ import annotations

import pytest
import torch

import pterun
from pterun.cli.options import example_program

pytestmark = pytest.mark.gpu


def test_replays_allocate_no_device_memory():
    method = pterun.Runtime.get().load_program(example_program(), device="cuda").load_method("forward")
    tokens = torch.randint(0, 1024, (1, 32), device="cuda")
    for _ in range(3):
        method.execute([tokens], clone_outputs=False)
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()["allocation.all.allocated"]
    for _ in range(10):
        method.execute([tokens], clone_outputs=False)
    torch.cuda.synchronize()
    assert torch.cuda.memory_stats()["allocation.all.allocated"] == before
    assert method.cuda_graph.replaying
