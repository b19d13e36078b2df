"""A delegate call in ``compile=True``'s functional form: one operator, which TorchInductor calls as it is.

A delegate runs its backend's code, which no compiler sees into (native code, a blob's own interpreter, its
own Triton kernels). In the functional form (functional.py) each delegate call is one call of
``pterun::delegate``, an operator whose results are the delegate's outputs, made new at each call. Tracing
learns their sizes from the backend (``BackendInterface.output_sizes``) without running the delegate;
Inductor fuses the steps around the calls and makes each from its own code (inside the CUDA graph captured
around the compiled code, on a GPU).

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

_PROCESS = secrets.token_hex(8)
_NUMBERS = itertools.count()
_LIVE: weakref.WeakValueDictionary[str, DelegateOp] = weakref.WeakValueDictionary()


class DelegateOp:
    """One delegate call of a functional form: called with the inputs, returns the outputs (new tensors)."""

    def __init__(self, execute: Callable[[list], None], sizes: Callable[[list], Sequence[tuple[int, ...]]],
                 count: int, inputs: Sequence[int], outputs: Sequence[tuple[int, torch.dtype]],
                 device: torch.device) -> None:
        """``count`` arguments: tensors read at ``inputs`` and written at ``outputs`` (with their dtypes)."""
        self.execute, self.sizes, self.count, self.device = execute, sizes, count, device
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
        outs = self.empty(args)
        for (k, _), out in zip(self.outputs, outs):
            args[k] = out
        self.execute(args)
        return outs

    def empty(self, args: list) -> list[torch.Tensor]:
        # Tracing asks with fake tensors; a backend answering may translate for new sizes, whose buffers must be
        # real: no tracing mode is on while it answers.
        with _disable_current_modes():
            sizes = list(self.sizes(args))
        return [torch.empty(size, dtype=dtype, device=self.device) for size, (_, dtype) in zip(sizes, self.outputs)]


@torch.library.custom_op("pterun::delegate", mutates_args=())
def delegate(token: str, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    return _LIVE[token].run(inputs)


@delegate.register_fake
def _(token: str, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    op = _LIVE[token]
    return op.empty(op.arguments(inputs))
