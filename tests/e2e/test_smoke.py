import torch

import pterun
from tests.support.compare import assert_matches
from tests.support.exporting import ExportSpec, export_program
from tests.support.models.small import MLP
from tests.support.oracle import run_reference


def _spec() -> ExportSpec:
    return ExportSpec(MLP(16, 32, 4, torch.nn.functional.gelu, lambda y: y.softmax(-1)), (torch.randn(2, 16),))


def test_mlp_matches_executorch():
    torch.manual_seed(0)
    exported = export_program("smoke-mlp", _spec)
    x = torch.randn(2, 16)
    program = pterun.Runtime.get().load_program(exported.pte)
    out = program.load_method("forward").execute([x])
    assert_matches(out, run_reference(exported.pte, [x]))
