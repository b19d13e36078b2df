"""ExecuTorch's WebGPU tests that fail on pterun, each with its reason (test id -> reason).

Ids are an op_tests case's ``op/case`` or an ops/ test's ``module.Class.method``.
"""

from __future__ import annotations

FAILURES: dict[str, str] = {}
