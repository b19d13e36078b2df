"""Whether the WebGPU tests run here: the one place that decides, for every test that needs an adapter.

A machine without a WebGPU adapter (no wgpu, no Vulkan driver) skips those
tests. On CI (``CI=true``, as CI services set it) the machine is set up to have
one (``.ci/run`` installs Mesa's lavapipe), so a missing adapter means a broken
setup or a broken backend: the tests fail instead, and cannot quietly stop
covering the backend.

Tests ask for an adapter with the ``needs_adapter`` mark (a module's
``pytestmark``, or a decorator).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import pytest

from pterun.backends.webgpu import device

RUN, SKIP, FAIL = "run", "skip", "fail"


def on_ci(environ: Mapping[str, str]) -> bool:
    return environ.get("CI", "").strip().lower() in ("true", "1")


def verdict(available: bool, reason: str, environ: Mapping[str, str]) -> tuple[str, str]:
    """What a test needing an adapter does (RUN, SKIP or FAIL), and why."""
    if available:
        return RUN, ""
    if on_ci(environ):
        return FAIL, f"{reason}; on CI (CI=true) there must be one (.ci/run installs Mesa's lavapipe)"
    return SKIP, reason


def require(environ: Mapping[str, str] = os.environ) -> None:
    """Skips or fails the calling test when this machine has no adapter, as :func:`verdict` says."""
    action, why = verdict(device.available(), device.unavailable_reason(), environ)
    if action == SKIP:
        pytest.skip(why)
    if action == FAIL:
        pytest.fail(why, pytrace=False)


@pytest.fixture(scope="session")
def webgpu_adapter() -> None:
    # Session scope: settled before any module-scoped fixture of the test runs.
    require()


needs_adapter = pytest.mark.usefixtures("webgpu_adapter")
