import os
import tempfile

from tests.backends.webgpu.adapter import webgpu_adapter  # noqa: F401 - the fixture behind needs_adapter

# Vulkan's loader warns on stderr when XDG_RUNTIME_DIR is unset (CI containers); the warning is
# harmless, so give the test process a private one before the backend first loads wgpu.
if "XDG_RUNTIME_DIR" not in os.environ:
    os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="pterun-xdg-")
