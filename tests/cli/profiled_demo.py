"""ExecuTorch's demo backend with per-node reporting, for the tests of tables with rows inside a delegate."""

from __future__ import annotations

import pterun
from pterun.backends import demo


class ProfiledDemo(demo.CompilerDemoBackend):
    """Reports each operator of a blob as a node, with the blob's debug handle and a numbered name (the way
    pterun's XNNPACK backend names its nodes)."""

    def profiled(self, handle, tracer):
        def run(args):
            for number, (op, *_, debug_handle) in enumerate(handle, 1):
                start = tracer.now()
                self.execute((handle[number - 1],), args)
                outputs = (args[-1],) if tracer.logs_values else ()
                tracer.node(start, tracer.now(), debug_handle=debug_handle, name=f"demo {op} #{number}",
                            outputs=outputs)

        return run


def runtime() -> pterun.Runtime:
    rt = pterun.Runtime()
    rt.backend_registry.register(demo.NAME, ProfiledDemo())
    return rt
