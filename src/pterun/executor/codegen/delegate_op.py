"""A delegate call in ``compile=True``'s functional form: the delegate's own operators where its backend offers
them, else one operator TorchInductor calls as it is.

A delegate runs its backend's code, which a compiler may not see into (native code, Triton launches). In the
functional form (functional.py) each delegate call is one call of ``pterun::delegate``, whose results are the
delegate's outputs, made new at each call. Its implementation is composite: traced, it becomes what it calls.
Where the backend offers the delegate as PyTorch operators for the call's sizes
(``BackendInterface.traced_execute``: XNNPACK's elementwise, transposing and attention delegates on a GPU),
those, which Inductor fuses with the steps around them; else ``pterun::opaque_delegate``, which Inductor calls
as it is, the sizes of its outputs given by the backend (``BackendInterface.output_sizes``) without running it.
Either way the compiled code runs inside the CUDA graph captured around it, on a GPU.

An operator takes no Python object, so the call names its delegate by a token, a string literal in the
generated code (Dynamo then guards on no object of the delegate's). Tokens begin with a number drawn once per
process: compiled code that Inductor's caches keep never finds, in another process, a delegate by a name it
reused. Such a method is traced and compiled in each process (the loader keeps its compiled code out of
pterun's load cache, where every process's tokens would leave an entry).
"""

from __future__ import annotations

import itertools
import secrets
import weakref
from collections.abc import Callable, Sequence

import torch
from torch.utils._python_dispatch import _disable_current_modes

from pterun.core.layout import strides_for
from pterun.errors import NotSupported
from pterun.executor.load.steps import FunctionalDelegate

_PROCESS = secrets.token_hex(8)
_NUMBERS = itertools.count()
_LIVE: weakref.WeakValueDictionary[str, DelegateOp] = weakref.WeakValueDictionary()


class DelegateOp:
    """One delegate call of a functional form, which ``pterun::delegate`` finds by its token: the call's inputs in,
    its outputs out, as new tensors."""

    def __init__(self, execute: Callable[[list], None], functional: FunctionalDelegate, count: int,
                 inputs: Sequence[int], outputs: Sequence[tuple[int, torch.dtype]], device: torch.device) -> None:
        """``count`` arguments: tensors read at ``inputs`` and written at ``outputs`` (with their dtypes)."""
        self.execute, self.count, self.device = execute, count, device
        self.sizes, self.traced = functional.sizes, functional.traced
        self.inputs = tuple(inputs)
        self.outputs = tuple(outputs)
        self.token = f"{_PROCESS}:{next(_NUMBERS)}"
        _LIVE[self.token] = self

    def arguments(self, inputs: Sequence[torch.Tensor]) -> list:
        args: list = [None] * self.count
        for k, t in zip(self.inputs, inputs):
            args[k] = t
        return args

    def run(self, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        # The delegate reads its arguments as laid out in planned memory: Inductor may hand a view of another
        # layout (a 4-d tensor's strides would read as channels-last to XNNPACK's backend).
        args = self.arguments([t if t.stride() == strides_for(t.shape, range(t.dim())) else
                               torch.empty(t.shape, dtype=t.dtype, device=t.device).copy_(t) for t in inputs])
        outs = self.outputs_into(args)
        self.execute(args)
        return outs

    def empty(self, args: list) -> list[torch.Tensor]:
        # Tracing asks with fake tensors; a backend answering may translate for new sizes, whose buffers must be
        # real: no tracing mode is on while it answers.
        with _disable_current_modes():
            sizes = self.sizes(args)
        if sizes is None:  # compiling fails, and the method runs uncompiled
            raise NotSupported(f"the delegate's backend gives no sizes of its outputs for inputs of sizes "
                               f"{[list(args[k].shape) for k in self.inputs]}")
        return [torch.empty(size, dtype=dtype, device=self.device) for size, (_, dtype) in zip(sizes, self.outputs)]

    def outputs_into(self, args: list) -> list[torch.Tensor]:
        """New outputs for a call with ``args``' inputs, put at their places in ``args``."""
        outs = self.empty(args)
        for (k, _), out in zip(self.outputs, outs):
            args[k] = out
        return outs

    def composite(self, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        """The delegate's operators for these inputs' sizes where its backend offers them, else the opaque call."""
        inputs = [t.contiguous() for t in inputs]
        args = self.arguments(inputs)
        with _disable_current_modes():
            traced = self.traced(args)
        if traced is None:
            return torch.ops.pterun.opaque_delegate(self.token, inputs)
        outs = self.outputs_into(args)
        traced(args)
        return outs


_LIBRARY = torch.library.Library("pterun", "FRAGMENT")
_LIBRARY.define("delegate(str token, Tensor[] inputs) -> Tensor[]")
_LIBRARY.impl("delegate", lambda token, inputs: _LIVE[token].composite(inputs), "CompositeImplicitAutograd")


@torch.library.custom_op("pterun::opaque_delegate", mutates_args=())
def opaque_delegate(token: str, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    return _LIVE[token].run(inputs)


@opaque_delegate.register_fake
def _(token: str, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    op = _LIVE[token]
    return op.empty(op.arguments(inputs))
