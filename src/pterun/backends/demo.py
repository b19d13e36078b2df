"""ExecuTorch's test backend, ``BackendWithCompilerDemo``, for programs made with its demo partitioners.

ExecuTorch's exporter tests (and its ``DeviceAwarePartitioner``, which tags a
delegate's inputs and outputs for a device) write this backend's blobs: a
text list of operators, ``"<count>version:0#op:demo::aten.add.Tensor,
numel:4, dtype:torch.float32<debug_handle>1#..."``. ExecuTorch runs them with
a toy C++ backend; this one runs them with torch on whatever device the
tensors are on, so device-tagged test programs run end to end.

Semantics follow ExecuTorch's test backend where it defines them: a blob
holding ``mm`` then ``add`` computes ``z = a @ x`` then ``z += b`` over its
arguments ``(a, x, b, z)``, and ``sin`` is the two-term Taylor series
``x - x**3 / 6``. A lone ``add`` or ``mm`` takes its two inputs and writes its
one output, which ExecuTorch's version does not handle. Other multi-operator
blobs do not say how their operators connect and are refused at init.

Not registered by default (it is a test backend): call :func:`register`.
"""

from __future__ import annotations

import re

import torch

from pterun.backends.interface import BackendInterface
from pterun.errors import DelegateInvalidCompatibility, InvalidArgument, NotSupported

NAME = "BackendWithCompilerDemo"
_OP = re.compile(
    r"op:demo::(?P<op>[^,]+), numel:(?P<numel>-?\d+), dtype:(?P<dtype>[^<]*)<debug_handle>(?P<handle>-?\d+)"
)
_SUPPORTED = ("aten.add.Tensor", "aten.mm.default", "aten.sin.default")


class CompilerDemoBackend(BackendInterface):
    def is_available(self) -> bool:
        return True

    def init(self, context, processed, compile_specs):
        text = bytes(processed).decode("utf-8", errors="replace")
        header = re.match(r"(-?\d+)version:(-?\d+)#", text)
        if header is None:
            raise DelegateInvalidCompatibility(f"{NAME}: blob does not start with '<count>version:<n>#'")
        count, version = int(header.group(1)), int(header.group(2))
        if version != 0:
            raise DelegateInvalidCompatibility(f"{NAME}: blob version is {version}; this runtime reads version 0")
        ops = [(m["op"], int(m["numel"]), m["dtype"], int(m["handle"])) for m in _OP.finditer(text)]
        if count < 0 or len(ops) != count:
            raise InvalidArgument(f"{NAME}: blob announces {count} instructions and holds {len(ops)}")
        for op, _, _, handle in ops:
            if op not in _SUPPORTED:
                raise DelegateInvalidCompatibility(f"{NAME}: unsupported op {op} (debug handle {handle})")
        names = [op for op, *_ in ops]
        if len(ops) > 1 and names != ["aten.mm.default", "aten.add.Tensor"]:
            # The blob lists operators but not how they connect; only the one multi-operator
            # shape ExecuTorch's backend defines (mm then add) can be run without guessing.
            raise DelegateInvalidCompatibility(f"{NAME}: cannot tell how {', '.join(names)} connect")
        return tuple(ops)

    def written_arguments(self, handle, args) -> range:
        # Every blob writes its last argument (``z`` of mm-then-add, the one output otherwise), no other.
        return range(max(len(args) - 1, 0), len(args))

    def execute(self, handle, args: list) -> None:
        out = args[-1]
        for op, _, dtype, debug_handle in handle:
            if not dtype.startswith("torch.float32"):
                raise NotSupported(f"{NAME} runs float32 only; got {dtype} (debug handle {debug_handle})")
            if op == "aten.sin.default":
                x = args[0]
                out.copy_(x - x * x * x / 6.0)
            elif len(args) == 4:
                a, x, b, z = args
                if op == "aten.mm.default":
                    torch.mm(a, x, out=z)
                else:
                    z.add_(b)
            elif op == "aten.mm.default":
                torch.mm(args[0], args[1], out=out)
            else:
                torch.add(args[0], args[1], out=out)


def register(registry) -> None:
    """Registers the demo backend under the id ExecuTorch's exporter writes."""
    registry.register(NAME, CompilerDemoBackend)
