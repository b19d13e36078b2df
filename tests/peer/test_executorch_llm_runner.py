"""ExecuTorch's own LLM-runner binding tests, run against pterun.llm.

The test module ships in ExecuTorch's wheel; its GenerationConfig tests are imported from there with
the module's ``GenerationConfig`` replaced by pterun's, so pterun passes the same assertions.

Out of scope, and why: TestImage, TestMultimodalInput, TestMultimodalRunner and TestHelperFunctions test
the multimodal inputs and runner, which pterun.llm does not have (text generation only).
"""

from __future__ import annotations

import types
import unittest

import pytest

upstream = pytest.importorskip("executorch.extension.llm.runner.test.test_runner_pybindings")

from pterun import llm  # noqa: E402


def _on_pterun(case: type[unittest.TestCase]) -> type[unittest.TestCase]:
    """``case``'s tests with every name of the upstream module that pterun.llm has taken from pterun.llm."""
    names = {name: getattr(llm, name) for name in vars(upstream) if hasattr(llm, name)}
    scope = {**vars(upstream), **names}
    tests = {name: types.FunctionType(test.__code__, scope, name, test.__defaults__, test.__closure__)
             for name, test in vars(case).items() if name.startswith("test") and callable(test)}
    assert tests, f"premise: {case.__name__} has tests"
    return type(f"{case.__name__}OnPterun", (unittest.TestCase,), tests)


TestGenerationConfigOnPterun = _on_pterun(upstream.TestGenerationConfig)


def test_the_upstream_tests_see_pterun():
    assert _on_pterun(upstream.TestGenerationConfig).test_default_values.__globals__["GenerationConfig"] \
        is llm.GenerationConfig
