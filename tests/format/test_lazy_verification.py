"""Each method's tables are verified when the method is loaded: a corrupt method fails there, naming itself,
and leaves the program and its other methods usable."""

from __future__ import annotations

import struct

import pytest
import torch

import pterun
from pterun.errors import InvalidProgram
from pterun.format import ProgramFile, Verification
from pterun.format._generated import program_generated as fb
from tests.format import build


def _two_methods_second_corrupt() -> bytes:
    """forward(x) = x + [1, 2]; "broken" is an identity whose one tensor's sizes vector runs past the end."""
    forward = build.add_constant(build.Tensor(data_buffer_idx=1))
    data = build.program([forward, build.identity(name="broken")], constant_buffers=[b"", build.floats(1, 2)])
    root = fb.Program.GetRootAs(data, 0)
    broken = root.ExecutionPlan(1)
    assert broken.Name() == b"broken"
    tensor = broken.Values(0).Val()
    sizes = tensor.Vector(tensor.Offset(8))  # Tensor.sizes: its first element; the length is the word before
    out = bytearray(data)
    struct.pack_into("<I", out, sizes - 4, 1 << 20)
    return bytes(out)


def test_the_program_and_its_good_method_load_and_run():
    data = _two_methods_second_corrupt()
    program = pterun.Runtime.get().load_program(data)
    assert program.method_names == {"forward", "broken"}
    x = torch.tensor([10.0, 20.0])
    (y,) = program.load_method("forward").execute([x])
    assert torch.equal(y, torch.tensor([11.0, 22.0]))


def test_the_corrupt_method_fails_at_its_load_naming_it():
    program = pterun.Runtime.get().load_program(_two_methods_second_corrupt())
    with pytest.raises(InvalidProgram, match=r"method 'broken': Program verification failed: pte.Tensor.sizes"):
        program.load_method("broken")
    # The same error every time: a failed walk is not charged twice against the program's bounds.
    for _ in range(3):
        with pytest.raises(InvalidProgram, match="method 'broken'"):
            program.load_method("broken")
    assert program.load_method("forward") is not None


def test_unverified_the_corrupt_method_still_fails_cleanly():
    pf = ProgramFile(_two_methods_second_corrupt(), Verification.Minimal)
    assert pf.plan("forward").name == "forward"
    with pytest.raises(InvalidProgram):  # unverified, its vectors are bounded as they are read
        pf.plan("broken")
