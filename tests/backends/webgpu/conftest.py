import os
import tempfile

# Vulkan's loader warns on stderr when XDG_RUNTIME_DIR is unset (CI containers); the warning is
# harmless, so give the test process a private one before the backend first loads wgpu.
if "XDG_RUNTIME_DIR" not in os.environ:
    os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="pterun-xdg-")
