"""Which of ExecuTorch's WebGPU tests run: all of them, or the fixed fast subset the test suite runs.

``PTERUN_WEBGPU_SUITE=all`` (scripts/webgpu-suite.sh) runs every op_tests case
and every ops/ test; otherwise only those named in ``FAST_CASES`` and
``FAST_TESTS``, a few seconds each on lavapipe, chosen to cover each kind of
operator (elementwise, normalization, resampling, reduction, quantization, a
quantized linear layer and convolution, attention, attention over a KV cache
with its start position read from an input) and each way the harness judges
(a case's golden and tolerance; a test's lowerings against the exported
program, the caches it updates in place included; a known failure). The
kernels themselves are tested more closely, without exporting, in
tests/backends/webgpu.
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
    "upsample_bilinear2d/af_true_non_2x",
    "argmax/tie",
    "quantize_per_tensor/ties",
    "linear_dq8ca_q4gsw/basic",
    "q8ta_conv2d/k3",
    "et_vk_sdpa/masked_bart",
})

FAST_TESTS = frozenset({
    "test_sdpa.TestSdpaDynamic.test_dynamic_export_emits_symint",
    "test_to_copy.ToCopyTest.test_float_passthrough_delegates",  # a known failure (known.py)
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
