"""ExecuTorch's own Python-bindings tests, run against pterun.pybindings.

The test module ships in ExecuTorch's wheel; it is imported from there and
its test case is pointed at pterun instead of ExecuTorch's compiled module,
so pterun passes the same assertions ExecuTorch does.

Out of scope, and why:
- test_device_planned_method_allocates_on_the_device needs ExecuTorch's CUDA
  backend and a GPU; it skips itself elsewhere. pterun's own device tests
  live in tests/gpu.
"""

from __future__ import annotations

import pytest

upstream = pytest.importorskip("executorch.extension.pybindings.test.test_pybindings")
# The quantized tests export through QuantFusionPass, which needs the quantized out-variants that
# loading ExecuTorch's quantized kernel library registers; the upstream file relies on another
# module having imported it.
pytest.importorskip("executorch.kernels.quantized")

from pterun import pybindings  # noqa: E402


class TestExecuTorchPybindingsOnPterun(upstream.PybindingsTest):
    def setUp(self):
        self.kernel_mode = "portable"
        self.load_fn = pybindings._load_for_executorch_from_buffer
        self.load_prog_fn = pybindings._load_program_from_buffer
        self.runtime = pybindings
