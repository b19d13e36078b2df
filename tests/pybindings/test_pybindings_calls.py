"""pterun.pybindings takes and refuses the same arguments as ExecuTorch's bindings, at every entry point
that runs a method, with the same exception types (``TypeError`` where pybind11 refuses the argument,
``RuntimeError`` where ExecuTorch's conversion does), and pterun's error codes."""

from __future__ import annotations

import collections

import numpy as np
import pytest
import torch

from pterun import pybindings
from pterun.errors import AccessFailed, ErrorCode, PteError
from tests.support.compare import assert_matches
from tests.threads.programs import float_inputs, float_mlp


class _Sub(torch.Tensor):
    pass


def _arguments() -> dict:
    (x,) = float_inputs(1)
    return {
        "list": [x], "tuple": (x,), "deque": collections.deque([x]), "tensor": x,
        "tensor subclass": x.as_subclass(_Sub),
        "list of subclass": [x.as_subclass(_Sub)], "list of parameter": [torch.nn.Parameter(x)],
        "dict": {0: x}, "generator": (v for v in [x]), "set": {1}, "None": None, "str": "ab", "int": 3,
        "nested list": [[x]], "ndarray": x.numpy(), "list of ndarray": [x.numpy()], "dict values": {0: x}.values(),
    }


ENTRIES = {
    "Module.forward": lambda module, method, a: module.forward(a),
    "Module.run_method": lambda module, method, a: module.run_method("forward", a),
    "Module.__call__": lambda module, method, a: module(a),
    "Method.call": lambda module, method, a: method.call(a),
    "Method.__call__": lambda module, method, a: method(a),
    "Method.set_inputs": lambda module, method, a: (method.set_inputs(a), method.execute(), method.get_outputs())[2],
}


def _outcome(call):
    try:
        return call(), None
    except (TypeError, RuntimeError) as exc:
        return None, exc


@pytest.mark.parametrize("entry", sorted(ENTRIES))
def test_entry_points_take_and_refuse_what_executorch_does(entry):
    from tests.support.oracle import _runtime

    portable_lib = _runtime()
    pte = str(float_mlp().pte)
    theirs = (portable_lib._load_for_executorch(pte), portable_lib._load_program(pte).load_method("forward"))
    ours = (pybindings._load_for_executorch(pte), pybindings._load_program(pte).load_method("forward"))
    call = ENTRIES[entry]
    accepted = 0
    for kind, argument in _arguments().items():
        expected, their_error = _outcome(lambda a=argument: call(*theirs, a))
        got, our_error = _outcome(lambda k=kind: call(*ours, _arguments()[k]))  # a generator is used up
        if their_error is None:
            assert our_error is None, f"{entry}({kind}): ExecuTorch runs it, pterun raises {our_error!r}"
            assert_matches(got, expected)
            accepted += 1
            continue
        assert our_error is not None, f"{entry}({kind}): ExecuTorch raises {their_error!r}, pterun runs it"
        assert isinstance(our_error, PteError), f"{entry}({kind}): {our_error!r}"
        assert isinstance(our_error, type(their_error)), f"{entry}({kind}): {our_error!r} for {their_error!r}"
        assert isinstance(our_error, TypeError) == isinstance(their_error, TypeError), f"{entry}({kind})"
        if isinstance(their_error, TypeError):
            assert our_error.code == ErrorCode.InvalidArgument and entry.split(".")[1] in str(our_error)
    assert accepted >= 3  # the premise: lists, tuples and deques run
    # Still works.
    assert_matches(call(*ours, float_inputs(2)), call(*theirs, float_inputs(2)))


def test_load_for_executorch_fails_at_load_on_a_missing_file(tmp_path):
    missing = tmp_path / "missing.pte"
    for load in (lambda: pybindings._load_for_executorch(str(missing)),
                 lambda: pybindings._load_program(str(missing)),
                 lambda: pybindings._load_for_executorch(str(float_mlp().pte), str(tmp_path / "missing.ptd"))):
        with pytest.raises(AccessFailed) as info:
            load()
        error = info.value
        assert isinstance(error, RuntimeError) and error.code == ErrorCode.AccessFailed  # as ExecuTorch: 0x22
        assert "missing.pt" in str(error) and "does not exist" in str(error)
    with pytest.raises(AccessFailed) as info:
        pybindings._load_for_executorch(str(tmp_path))
    assert str(tmp_path) in str(info.value) and "directory" in str(info.value)
    module = pybindings._load_for_executorch(str(float_mlp().pte))
    assert module.forward(float_inputs(1))[0].shape == (4, 10)


def test_numpy_arrays_are_not_inputs():
    module = pybindings._load_for_executorch(str(float_mlp().pte))
    with pytest.raises(PteError, match="Unsupported python type <class 'numpy.ndarray'>") as info:
        module.forward([np.zeros((4, 20), dtype=np.float32)])
    assert info.value.code == ErrorCode.InvalidArgument
    assert module.forward(float_inputs(1))[0].shape == (4, 10)
