"""The one decision whether WebGPU tests run, skip (no adapter here) or fail (no adapter on CI)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pterun.backends.webgpu import device
from tests.backends.webgpu.adapter import FAIL, RUN, SKIP, require, verdict


@pytest.mark.parametrize("available,environ,action", [
    (True, {}, RUN),
    (True, {"CI": "true"}, RUN),
    (False, {}, SKIP),
    (False, {"CI": "false"}, SKIP),
    (False, {"CI": ""}, SKIP),
    (False, {"CI": "true"}, FAIL),
    (False, {"CI": "True"}, FAIL),
    (False, {"CI": "1"}, FAIL),
])
def test_verdict(available, environ, action):
    got, why = verdict(available, "no Vulkan driver", environ)
    assert got == action
    assert ("no Vulkan driver" in why) == (action != RUN)


def test_a_missing_adapter_fails_on_ci_and_skips_elsewhere(monkeypatch):
    monkeypatch.setattr(device, "_probe", "no WebGPU adapter: none in this test")
    assert not device.available()
    with pytest.raises(pytest.fail.Exception, match="none in this test; on CI .CI=true. there must be one"):
        require({"CI": "true"})
    with pytest.raises(pytest.skip.Exception, match="none in this test"):
        require({})


def test_no_test_module_decides_for_itself():
    """Every WebGPU test that needs an adapter goes through needs_adapter, so none can skip on CI."""
    here = Path(__file__).parent
    modules = sorted(m for m in here.glob("test_webgpu_*.py") if m.name != Path(__file__).name)
    assert len(modules) >= 5, "premise: the WebGPU test modules are next to this one"
    deciding = [m.name for m in modules if "device.available()" in m.read_text() or "skipif" in m.read_text()]
    assert deciding == []
