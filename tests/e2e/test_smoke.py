import torch

import pterun
from tests.support.compare import assert_matches
from tests.support.exporting import ExportSpec, export_program
from tests.support.oracle import run_reference


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 4)

    def forward(self, x):
        return self.fc2(torch.nn.functional.gelu(self.fc1(x))).softmax(-1)


def test_mlp_matches_executorch():
    torch.manual_seed(0)
    exported = export_program("smoke-mlp", lambda: ExportSpec(MLP(), (torch.randn(2, 16),)))
    x = torch.randn(2, 16)
    program = pterun.Runtime.get().load_program(exported.pte)
    out = program.load_method("forward").execute([x])
    assert_matches(out, run_reference(exported.pte, [x]))
