"""Which of ExecuTorch's WebGPU tests run: all of them, or the fixed fast subset the test suite runs.

``PTERUN_WEBGPU_SUITE=all`` (scripts/webgpu-suite.sh) runs every op_tests case
and every ops/ test; otherwise only those named in ``FAST``, a few seconds each
on lavapipe, chosen to cover each kind of operator pterun runs (elementwise,
shape, reductions, normalizations, matrix products, convolutions, quantized
linear layers, attention over a KV cache) once.
"""

from __future__ import annotations

import importlib
import os
import pkgutil
import unittest
from collections.abc import Iterator
from dataclasses import dataclass

from tests.peer.webgpu.harness import UPSTREAM

ALL = os.environ.get("PTERUN_WEBGPU_SUITE", "").strip().lower() == "all"

FAST_CASES = frozenset({
    "add/regular_2d",
    "rms_norm/baseline",
})

FAST_TESTS = frozenset({
    "test_rope.TestRope.test_export_delegates",
})


@dataclass(frozen=True)
class UpstreamTest:
    module: str  # the file's name under ops/, as a module path ("test_add", "index.test_index")
    cls: type
    method: str

    @property
    def id(self) -> str:
        return f"{self.module}.{self.cls.__name__}.{self.method}"


def ops_tests() -> Iterator[UpstreamTest]:
    """Every test method of every unittest case in ExecuTorch's ops/ test files, in file order."""
    package = importlib.import_module(f"{UPSTREAM}.ops")
    for info in pkgutil.walk_packages(package.__path__, prefix=f"{package.__name__}."):
        if not info.name.rsplit(".", 1)[-1].startswith("test_"):
            continue
        module = importlib.import_module(info.name)
        short = info.name[len(package.__name__) + 1 :]
        for cls in vars(module).values():
            if isinstance(cls, type) and issubclass(cls, unittest.TestCase) and cls.__module__ == module.__name__:
                for name in unittest.TestLoader().getTestCaseNames(cls):
                    yield UpstreamTest(short, cls, name)
