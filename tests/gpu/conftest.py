"""The GPU suite: runs programs exported ahead of time (scripts/make-gpu-fixtures.py) on a CUDA device.

Tests here need no ExecuTorch: ExecuTorch's outputs on the CPU were saved next to each program.
They run under PyTorch's default settings, as users do (cuDNN's TF32 on): pterun must compute float32
in float32 whatever the process has set.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

FIXTURES = Path(os.environ.get("PTERUN_GPU_FIXTURES", Path(__file__).resolve().parents[2] / "fixtures" / "gpu"))


def fixture_dirs(kind: str) -> list[Path]:
    root = FIXTURES / kind
    return sorted(p for p in root.iterdir() if p.is_dir()) if root.exists() else []


def fixture_params(kind: str):
    dirs = fixture_dirs(kind)
    if not dirs:
        return [pytest.param(None, id=f"no-{kind}-fixtures")]
    return [pytest.param(d, id=d.name) for d in dirs]


def load_fixture(directory: Path | None):
    if directory is None:
        pytest.skip("no fixtures: run scripts/make-gpu-fixtures.py")
    calls = torch.load(directory / "calls.pt", weights_only=False)
    expected = torch.load(directory / "expected.pt", weights_only=False)
    ptd = sorted(directory.glob("*.ptd"))
    return directory / "program.pte", ptd, calls, expected


def on(device: str, values: list) -> list:
    return [v.to(device) if isinstance(v, torch.Tensor) else v for v in values]


def captured(fn):
    """Runs ``fn`` once eagerly (compiling its kernels), then captures it in a CUDA graph and replays that."""
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph
