"""Programs the profile and compare tests run: exported once per run, with an ETRecord where one is needed."""

from __future__ import annotations

import torch

from tests.support.exporting import ExportSpec, export_program
from tests.support.inspecting import Recorded, RecordedProgram, export_recorded


class Mlp(torch.nn.Module):
    """Operators that occur several times (linear, relu), and one that occurs once (add)."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 16)
        self.b = torch.nn.Linear(16, 16)
        self.c = torch.nn.Linear(16, 4)

    def forward(self, x, y):
        h = torch.relu(self.a(x))
        h = torch.relu(self.b(h))
        return self.c(h) + y, h.sum(dim=-1)


class SmallCnn(torch.nn.Module):
    """Convolutions whose ReLU XNNPACK's exporter fuses into them, a pooling, a linear layer."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.b = torch.nn.Conv2d(8, 8, 3, stride=2, padding=1)
        self.head = torch.nn.Linear(8, 4)

    def forward(self, x):
        h = torch.relu(self.b(torch.relu(self.a(x))))
        return self.head(h.mean(dim=(2, 3)))


class AddThenMul(torch.nn.Module):
    def forward(self, x, y):
        return (x + y) * y


def _mlp_inputs():
    generator = torch.Generator().manual_seed(3)
    return (torch.randn(2, 8, generator=generator), torch.randn(2, 4, generator=generator))


def _image():
    return (torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(5)),)


def _seeded(make):
    torch.manual_seed(0)
    return make()


def mlp():
    """The MLP lowered with no delegate."""
    return export_program("cli-mlp", lambda: ExportSpec(_seeded(Mlp), _mlp_inputs()))


def recorded_mlp() -> RecordedProgram:
    """The MLP with an ETRecord that holds its example inputs as representative inputs."""
    return export_recorded("cli-mlp", lambda: Recorded(_seeded(Mlp), _mlp_inputs()))


def xnnpack_partitioners():
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    return [XnnpackPartitioner()]


def recorded_xnnpack_cnn() -> RecordedProgram:
    """The small CNN lowered to XNNPACK, with an ETRecord."""
    return export_recorded("cli-cnn-xnnpack", lambda: Recorded(_seeded(SmallCnn), _image(),
                                                               partitioners=xnnpack_partitioners))


def recorded_xnnpack_cnn_q8() -> RecordedProgram:
    """The small CNN quantized to 8 bits per channel (PT2E, XNNPACK's quantizer), lowered to XNNPACK."""

    def build():
        from tests.support.quantizing import quantize

        generator = torch.Generator().manual_seed(6)
        calibration = [(torch.randn(1, 3, 16, 16, generator=generator),) for _ in range(4)]
        module = quantize(_seeded(SmallCnn).eval(), calibration[0], calibration, "per-channel")
        return Recorded(module, _image(), partitioners=xnnpack_partitioners)

    return export_recorded("cli-cnn-xnnpack-q8", build)


def demo_delegated() -> RecordedProgram:
    """``(x + y) * y`` with the add in ExecuTorch's demo backend, exported with an ETRecord."""

    def partitioners():
        from executorch.exir.backend.test.op_partitioner_demo import AddMulPartitionerDemo

        return [AddMulPartitionerDemo()]

    inputs = (torch.randn(2, 2, generator=torch.Generator().manual_seed(4)),
              torch.randn(2, 2, generator=torch.Generator().manual_seed(8)))
    return export_recorded("cli-demo-add", lambda: Recorded(AddThenMul(), inputs, partitioners=partitioners))
