"""What a call's ``inputs`` argument may be: a sequence of values, decided as ExecuTorch's bindings decide it."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import torch

from pterun.errors import InvalidArgumentType

_sequence_check = ctypes.pythonapi.PySequence_Check
_sequence_check.argtypes = [ctypes.py_object]
_sequence_check.restype = ctypes.c_int


def is_sequence(value) -> bool:
    """Whether Python calls ``value`` a sequence (``PySequence_Check``), as ExecuTorch's bindings decide
    what a list of inputs is: lists, tuples, deques, anything indexable by position; not a dict, a set,
    a generator or a tensor."""
    return bool(_sequence_check(value))


def input_sequence(inputs, where: str, *, one_tensor: bool) -> Sequence:
    """The inputs of a call as a sequence, or an :class:`InvalidArgumentType` naming what was passed.

    ``one_tensor``: a single tensor is the only input (``execute``, as ExecuTorch's ``Method.execute``).
    Strings and bytes are sequences to Python but never a list of inputs.
    """
    if isinstance(inputs, torch.Tensor):
        if one_tensor:
            return (inputs,)
        raise InvalidArgumentType(f"{where}: expected a list of inputs, got {_describe(inputs)} (pass [tensor])")
    if isinstance(inputs, (str, bytes, bytearray, memoryview)) or not is_sequence(inputs):
        raise InvalidArgumentType(f"{where}: expected a list of inputs, got {_describe(inputs)}")
    return inputs


def _describe(value) -> str:
    if isinstance(value, torch.Tensor):
        try:
            return f"a Tensor of shape {list(value.shape)}"
        except RuntimeError:  # a nested tensor
            return "a Tensor"
    if value is None:
        return "None"
    kind = type(value)
    name = kind.__name__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"
