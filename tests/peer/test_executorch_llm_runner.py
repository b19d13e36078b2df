"""ExecuTorch's own LLM-runner binding tests, run against pterun.llm.

The test module ships in ExecuTorch's wheel; each of its test classes (GenerationConfig, Image,
MultimodalInput, MultimodalRunner and the make_* helpers) is imported from there with every name the module
takes from ExecuTorch's runner (``GenerationConfig``, ``Image``, ``MultimodalInput``, ``MultimodalRunner``,
``make_image_input``, ``make_text_input``) replaced by pterun.llm's, so pterun passes the same assertions.
None of them needs ExecuTorch's C++ build beyond the names replaced.
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
    functions = {name: types.FunctionType(f.__code__, scope, name, f.__defaults__, f.__closure__)
                 for name, f in vars(case).items() if isinstance(f, types.FunctionType)}
    assert any(name.startswith("test") for name in functions), f"premise: {case.__name__} has tests"
    return type(f"{case.__name__}OnPterun", (unittest.TestCase,), functions)


CASES = ("TestGenerationConfig", "TestImage", "TestMultimodalInput", "TestMultimodalRunner", "TestHelperFunctions")
TestGenerationConfigOnPterun = _on_pterun(upstream.TestGenerationConfig)
TestImageOnPterun = _on_pterun(upstream.TestImage)
TestMultimodalInputOnPterun = _on_pterun(upstream.TestMultimodalInput)
TestMultimodalRunnerOnPterun = _on_pterun(upstream.TestMultimodalRunner)
TestHelperFunctionsOnPterun = _on_pterun(upstream.TestHelperFunctions)


def test_the_upstream_tests_see_pterun():
    upstream_cases = {name for name, value in vars(upstream).items()
                      if isinstance(value, type) and issubclass(value, unittest.TestCase)}
    assert upstream_cases == set(CASES), "the upstream module's test classes changed: run the new ones here"
    for name in ("GenerationConfig", "Image", "MultimodalInput", "MultimodalRunner", "make_image_input",
                 "make_text_input"):
        assert TestHelperFunctionsOnPterun.test_make_text_input.__globals__[name] is getattr(llm, name), name
    assert TestMultimodalRunnerOnPterun.setUp.__globals__["MultimodalRunner"] is llm.MultimodalRunner
