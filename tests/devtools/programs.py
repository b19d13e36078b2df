"""The programs the Inspector tests export with an ETRecord: small, and each about one thing."""

from __future__ import annotations

import torch

from tests.support.inspecting import Recorded, RecordedProgram, export_recorded
from tests.support.models import build


def _seeded(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(7))


class Mlp(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = torch.nn.Linear(16, 32), torch.nn.Linear(32, 8)

    def forward(self, x):
        return torch.relu(self.down(torch.sigmoid(self.up(x)) * 2))


class ConvNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.conv2 = torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.Conv2d(8, 8, 3, stride=2)
        self.norm = torch.nn.BatchNorm2d(8)
        self.head = torch.nn.Linear(8, 4)

    def forward(self, x):
        x = torch.nn.functional.max_pool2d(torch.relu(self.norm(self.conv1(x))), 2)
        x = torch.tanh(self.conv2(x))
        return self.head(x.mean(dim=(2, 3)))


class Counter(torch.nn.Module):
    """A mutable buffer: a running sum the program updates in place."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("total", torch.zeros(4, 8))
        self.scale = torch.nn.Linear(8, 8)

    def forward(self, x):
        self.total.add_(self.scale(x))
        return self.total * 0.5 + x


class Regroup(torch.nn.Module):
    """A dynamic batch read back from the tensor's size at run time (sym_size, a view over it)."""

    def __init__(self) -> None:
        super().__init__()
        self.up = torch.nn.Linear(16, 32)

    def forward(self, x):
        h = torch.sigmoid(self.up(x))
        return h.reshape(x.shape[0] * 2, 16).sum(dim=0) * 2.0


class Tanh(torch.nn.Module):
    """XNNPACK takes all of it; no activation it could fold into the node before (so every node's output
    is the output of the operator whose debug handle it carries)."""

    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = torch.nn.Linear(16, 32), torch.nn.Linear(32, 8)

    def forward(self, x):
        return torch.tanh(self.down(torch.sigmoid(self.up(x)) * 2.0) + x[:, :8])


def _xnnpack() -> list:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    return [XnnpackPartitioner()]


def _transformers(name: str):
    def make() -> Recorded:
        model = build(name)
        return Recorded(model.module, model.example_inputs)

    return make


PROGRAMS = {
    "mlp": lambda: Recorded(Mlp(), (_seeded(4, 16),)),
    "convnet": lambda: Recorded(ConvNet(), (_seeded(2, 3, 12, 12),)),
    "llama": _transformers("llama"),
    "gpt2": _transformers("gpt2"),
    "bert": _transformers("bert"),
    "dynamic": lambda: Recorded(
        Regroup(), (_seeded(5, 16),), dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=32)},)
    ),
    "mutable": lambda: Recorded(Counter(), (_seeded(4, 8),)),
    "xnnpack": lambda: Recorded(Tanh(), (_seeded(4, 16),), partitioners=_xnnpack),
}


def recorded(name: str) -> RecordedProgram:
    def make() -> Recorded:
        torch.manual_seed(0)
        return PROGRAMS[name]()

    return export_recorded(name, make)


def xnnpack_nodes(pte) -> tuple[list[int], int]:
    """The debug handles of the nodes of the forward method's one XNNPACK blob, in order, and the instruction
    that calls it."""
    from pterun.backends.xnnpack.blob import split_blob
    from pterun.backends.xnnpack.graph import read_graph
    from pterun.format import ProgramFile

    program = ProgramFile(pte)
    plan = program.plan("forward")
    assert [d.backend_id for d in plan.delegates] == ["XnnpackBackend"], "premise: one XNNPACK delegate"
    delegate = plan.delegates[0]
    assert not delegate.inline, "premise: the blob is a segment"
    graph = read_graph(split_blob(program.segment(delegate.index)), program.named_data)
    calls = [i for i, instruction in enumerate(plan.instructions) if type(instruction).__name__ == "DelegateCall"]
    assert len(calls) == 1, f"premise: one delegate call; the plan has {plan.instructions}"
    return [node.debug_handle for node in graph.nodes], calls[0]
