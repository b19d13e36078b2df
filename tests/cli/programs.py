"""Programs the profile and compare tests run: exported once per run, with an ETRecord where one is needed."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

import torch

from tests.support.exporting import ExportSpec, cache_root, export_program

_LOCK = threading.Lock()


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


def _mlp_inputs():
    generator = torch.Generator().manual_seed(3)
    return (torch.randn(2, 8, generator=generator), torch.randn(2, 4, generator=generator))


def mlp():
    """The MLP lowered with no delegate."""
    torch.manual_seed(0)
    return export_program("cli-mlp", lambda: ExportSpec(Mlp(), _mlp_inputs()))


@dataclass
class RecordedProgram:
    pte: Path
    etrecord: Path
    inputs: tuple


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


def recorded_mlp(partitioners=None, key: str = "cli-mlp-etrecord") -> RecordedProgram:
    """The MLP exported with an ETRecord that holds its example inputs as representative inputs."""
    return _recorded(Mlp, _mlp_inputs, partitioners, key)


def recorded_xnnpack_cnn() -> RecordedProgram:
    """The small CNN lowered to XNNPACK, with an ETRecord."""
    return _recorded(SmallCnn, lambda: (torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(5)),),
                     xnnpack_partitioners, "cli-cnn-xnnpack-etrecord")


def recorded_xnnpack_cnn_q8() -> RecordedProgram:
    """The small CNN quantized to 8 bits per channel (PT2E, XNNPACK's quantizer), lowered to XNNPACK."""

    def quantized():
        from tests.support.quantizing import quantize

        generator = torch.Generator().manual_seed(6)
        calibration = [(torch.randn(1, 3, 16, 16, generator=generator),) for _ in range(4)]
        return quantize(SmallCnn().eval(), calibration[0], calibration, "per-channel")

    return _recorded(quantized, lambda: (torch.randn(1, 3, 16, 16, generator=torch.Generator().manual_seed(5)),),
                     xnnpack_partitioners, "cli-cnn-xnnpack-q8-etrecord")


def _recorded(module, make_inputs, partitioners, key: str) -> RecordedProgram:
    directory = cache_root() / key
    pte, etrecord, inputs = directory / "program.pte", directory / "etrecord.bin", directory / "inputs.pt"
    with _LOCK:
        if not pte.exists():
            from executorch.exir import to_edge_transform_and_lower
            from torch.export import export

            torch.manual_seed(0)
            example = make_inputs()
            with torch.no_grad():
                exported = export(module().eval(), example, strict=False)
            kwargs = {"partitioner": partitioners()} if partitioners else {}
            program = to_edge_transform_and_lower(exported, generate_etrecord=True, **kwargs).to_executorch()
            record = program.get_etrecord()
            record.update_representative_inputs(list(example))
            directory.mkdir(parents=True, exist_ok=True)
            record.save(str(etrecord))
            torch.save(example, inputs)
            pte.write_bytes(program.buffer)  # last: its presence says the others are there
        return RecordedProgram(pte, etrecord, torch.load(inputs, weights_only=False))


def xnnpack_partitioners():
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    return [XnnpackPartitioner()]


def demo_delegated(key: str = "cli-demo-add-etrecord") -> RecordedProgram:
    """``(x + y) * y`` with the add in ExecuTorch's demo backend, exported with an ETRecord."""
    directory = cache_root() / key
    pte, etrecord, inputs = directory / "program.pte", directory / "etrecord.bin", directory / "inputs.pt"
    with _LOCK:
        if not pte.exists():
            from executorch.exir import to_edge_transform_and_lower
            from executorch.exir.backend.test.op_partitioner_demo import AddMulPartitionerDemo
            from torch.export import export

            example = (torch.randn(2, 2), torch.randn(2, 2))
            exported = export(AddThenMul(), example, strict=False)
            program = to_edge_transform_and_lower(exported, partitioner=[AddMulPartitionerDemo()],
                                                  generate_etrecord=True).to_executorch()
            record = program.get_etrecord()
            record.update_representative_inputs(list(example))
            directory.mkdir(parents=True, exist_ok=True)
            record.save(str(etrecord))
            torch.save(example, inputs)
            pte.write_bytes(program.buffer)
        return RecordedProgram(pte, etrecord, torch.load(inputs, weights_only=False))


class AddThenMul(torch.nn.Module):
    def forward(self, x, y):
        return (x + y) * y
