"""ExecuTorch's own Inspector tests that run a program with ETDump, run against pterun.

The test module ships in ExecuTorch's wheel. These tests load the program through
``_load_for_executorch_from_buffer`` (a name the module imports) or through
``executorch.runtime.Runtime`` (imported inside the test); both are pointed at pterun's
for the duration of each test, so pterun's ETDump passes the assertions ExecuTorch's does.

Not here, and why: the rest of inspector_test.py builds ETDumps by hand or mocks the runtime
(nothing of pterun's runs); devtools/etdump/tests/serialize_test.py round-trips ETDump objects through
ExecuTorch's serializer, without a runtime.
"""

from __future__ import annotations

import pytest

upstream = pytest.importorskip("executorch.devtools.inspector.tests.inspector_test")
pytest.importorskip("executorch.backends.xnnpack.partition.xnnpack_partitioner")

import pterun  # noqa: E402
from pterun import pybindings  # noqa: E402


@pytest.fixture(autouse=True)
def on_pterun(monkeypatch):
    import executorch.runtime

    loads = []

    def load_for_executorch_from_buffer(*args, **kwargs):
        loads.append("_load_for_executorch_from_buffer")
        return pybindings._load_for_executorch_from_buffer(*args, **kwargs)

    class Runtime:
        """pterun's Runtime, counting the programs it loads."""

        @staticmethod
        def get():
            return Runtime

        @staticmethod
        def load_program(*args, **kwargs):
            loads.append("load_program")
            return pterun.Runtime.get().load_program(*args, **kwargs)

    monkeypatch.setattr(upstream, "_load_for_executorch_from_buffer", load_for_executorch_from_buffer)
    monkeypatch.setattr(executorch.runtime, "Runtime", Runtime)
    monkeypatch.setattr(executorch.runtime, "Verification", pterun.Verification)
    yield
    assert loads, "premise: the test ran its program on pterun"


class TestInspectorOnPterun(upstream.TestInspector):
    """Only the tests that run a program; the others test the Inspector alone."""


for _name in list(vars(upstream.TestInspector)):
    if _name.startswith("test_") and _name not in {
        "test_transformer_block_xnnpack_numeric_gap_within_tolerance",
        "test_intermediate_tensor_comparison_with_torch_export",
    }:
        setattr(TestInspectorOnPterun, _name, None)


class TestInplaceOpsIntermediateOutputOnPterun(upstream.TestInplaceOpsIntermediateOutput):
    pass
