"""The XnnpackBackend delegate: XNNPACK graphs from ExecuTorch's XnnpackPartitioner, run with torch ops."""

from pterun.backends.xnnpack.backend import NAME, XnnpackBackend, XnnpackDelegate

__all__ = ["NAME", "XnnpackBackend", "XnnpackDelegate"]
