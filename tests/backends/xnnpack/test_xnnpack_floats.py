"""Float fields of XNNPACK blobs (NaN, infinities, huge and denormal values): a PteError or a correct result.

The graph becomes generated Python; a float from the blob must reach it as a
value, not as its text (``repr(nan)`` is the bare name ``nan``). Each float
field of two exported blobs (fused output bounds, a leaky ReLU slope, a pad
value; per-tensor quantization scales) is set to each special value in turn.
pterun must then refuse the program with a PteError that is not ``Internal``,
or run it; when it runs and ExecuTorch's runtime runs the same file, the
results must be the same.
"""

from __future__ import annotations

import math
import struct
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import pterun
from pterun.errors import ErrorCode, InvalidProgram, PteError
from tests.backends.xnnpack.programs import export_quantized, node_kinds, partitioners
from tests.support.exporting import ExportSpec, export_program
from tests.support.file_structure import map_xnnpack_blobs
from tests.support.oracle import run_reference

# Every float the schema has, as the structure walker names them.
FLOAT_FIELDS = (
    "xnngraph.PerTensorQuant.scale", "xnngraph.PerChannelQuant.scale[]", "xnngraph.PerChannelGroupQuant.scale[]",
    "xnngraph.OutputMinMax.output_min", "xnngraph.OutputMinMax.output_max",
    "xnngraph.XNNStaticConstantPad.padding_value", "xnngraph.XNNELU.alpha", "xnngraph.XNNLeakyReLU.negative_slope",
)
VALUES = [math.nan, math.inf, -math.inf, 3.0e38, -3.0e38, 1e-45, -0.0]


class Floats(torch.nn.Module):
    """A fused clamp (output bounds), a leaky ReLU slope and a pad value, all in XNNPACK blobs."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        y = F.hardtanh(self.fc(x), -0.5, 0.5)
        y = F.leaky_relu(y, 0.1) + torch.sigmoid(y)
        return F.pad(y, (1, 1, 1, 1), value=0.25)


def _float_model():
    exported = export_program("trust-xnnpack-floats-v2",
                              lambda: ExportSpec(Floats(), (torch.randn(1, 2, 4, 8),), lower=partitioners))
    assert {"XNNFullyConnected", "XNNLeakyReLU", "XNNStaticConstantPad"} <= set(node_kinds(exported.pte))
    return exported


def float_fields(pte: Path) -> list[tuple[str, int]]:
    """(field name, position in the .pte) of every float in the method's XNNPACK blobs."""
    fields, _ = map_xnnpack_blobs(pte.read_bytes(), ["forward"])
    return [(f.name, f.pos) for f in fields if f.name in FLOAT_FIELDS]


@pytest.fixture(scope="module")
def subjects():
    quantized = export_quantized("mlp", "per-tensor")
    made = {}
    for name, exported in (("float", _float_model()), ("q8", quantized)):
        fields = float_fields(exported.pte)
        # Each kind of field, at most three places of it: enough to reach every node that reads one.
        kept, seen = [], {}
        for field in fields:
            seen[field[0]] = seen.get(field[0], 0) + 1
            if seen[field[0]] <= 3:
                kept.append(field)
        made[name] = (exported, kept)
    assert {f for f, _ in made["float"][1]} >= {"xnngraph.OutputMinMax.output_max",
                                               "xnngraph.XNNLeakyReLU.negative_slope",
                                               "xnngraph.XNNStaticConstantPad.padding_value"}
    assert {f for f, _ in made["q8"][1]} >= {"xnngraph.PerTensorQuant.scale"}
    return made


def _run(data: bytes, inputs) -> list | PteError:
    try:
        return pterun.Runtime.get().load_program(data).load_method("forward").execute(list(inputs))
    except PteError as exc:
        return exc


@pytest.mark.parametrize("subject", ["float", "q8"])
@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_float_fields_give_an_error_or_a_correct_result(subjects, subject, value, tmp_path):
    exported, fields = subjects[subject]
    data = exported.pte.read_bytes()
    inputs = exported.forward_inputs()
    baseline = _run(data, inputs)
    assert isinstance(baseline, list)  # premise: the unmodified program runs
    for name, position in fields:
        mutated = bytearray(data)
        struct.pack_into("<f", mutated, position, value)
        what = f"{subject}: {name} at {position} = {value}"
        ours = _run(bytes(mutated), inputs)
        if isinstance(ours, PteError):
            assert ours.code != ErrorCode.Internal, f"{what}: {ours}"
            assert "NameError" not in str(ours), f"{what}: {ours}"
            continue
        assert [(o.shape, o.dtype) for o in ours] == [(o.shape, o.dtype) for o in baseline], what
        path = tmp_path / "mutated.pte"
        path.write_bytes(bytes(mutated))
        try:
            theirs = run_reference(path, list(inputs))
        except RuntimeError:
            continue  # ExecuTorch refuses it: there is no reference result, and ours is well formed
        for a, b in zip(ours, theirs):
            assert torch.allclose(a, b, atol=1e-6, rtol=1e-5, equal_nan=True), f"{what}: differs from ExecuTorch"


def test_a_nan_output_bound_is_refused_at_load(subjects):
    """A NaN output_max used to become the bare name ``nan`` in generated code (NameError at execute)."""
    exported, fields = subjects["float"]
    data = exported.pte.read_bytes()
    (position,) = [p for f, p in fields if f == "xnngraph.OutputMinMax.output_max"]
    mutated = bytearray(data)
    struct.pack_into("<f", mutated, position, math.nan)
    program = pterun.Runtime.get().load_program(bytes(mutated))
    with pytest.raises(InvalidProgram) as info:
        program.load_method("forward")
    assert info.value.code == 0x23
    assert "XNNFullyConnected" in str(info.value) and "output bounds [-0.5, nan]" in str(info.value)
    # The unmodified program still runs.
    (out,) = pterun.Runtime.get().load_program(data).load_method("forward").execute(list(exported.forward_inputs()))
    torch.testing.assert_close(out, Floats()(*exported.forward_inputs()))


def test_special_floats_reach_generated_code_as_values(subjects):
    """An infinite pad value runs, and the generated source names the value rather than spelling it."""
    exported, fields = subjects["float"]
    data = bytearray(exported.pte.read_bytes())
    (position,) = [p for f, p in fields if f == "xnngraph.XNNStaticConstantPad.padding_value"]
    struct.pack_into("<f", data, position, -math.inf)
    method = pterun.Runtime.get().load_program(bytes(data)).load_method("forward")
    (out,) = method.execute(list(exported.forward_inputs()))
    assert torch.isneginf(out[0, 0, 0]).all() and torch.isfinite(out[0, 0, 1:-1, 1:-1]).all()
    sources = [handle.source for handle in method.delegate_handles]
    assert sources and not any("inf" in source or "nan" in source for source in sources)
