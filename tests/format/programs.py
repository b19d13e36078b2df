"""Real programs for the format tests and the malformed-input tests, exported once and cached.

Each builder exports with ExecuTorch's own exporter so the files carry every
feature the reader handles: a constant segment, a mutable data segment with
initial values, external constants in a .ptd, delegate blobs inline and in
segments, and named data in the program. Features the exporter no longer
writes (the inline ``constant_buffer``) are made by rewriting an exported
program with ExecuTorch's serializer.

The ``SinBackend`` half lives here too: ``SinDelegate`` is what the exporter
calls to lower ``aten.sin`` and :class:`SinRuntimeBackend` is what pterun
runs. The blob is ``BLOB_MAGIC`` and the scale is stored as named data, so a
blob or key the backend does not recognise is reported as ExecuTorch's
delegate errors are.
"""

from __future__ import annotations

import struct
from pathlib import Path

import torch

from pterun.backends import BackendInitContext, BackendInterface
from pterun.errors import DelegateInvalidCompatibility, DelegateInvalidHandle
from tests.support.exporting import Exported, ExportSpec, export_program, locked, publish, scratch

BLOB_MAGIC = b"pterun-sin-v1"
SCALE_KEY = "sin_scale"
SCALE = 1.5


class SinRuntimeBackend(BackendInterface):
    """Runs the blobs SinDelegate writes: out = sin(x) * scale."""

    def is_available(self) -> bool:
        return True

    def init(self, context: BackendInitContext, processed: memoryview, compile_specs) -> float:
        if bytes(processed) != BLOB_MAGIC:
            raise DelegateInvalidCompatibility(f"not a sin delegate blob: {bytes(processed[:32])!r}")
        data = context.named_data.get(SCALE_KEY)
        if data is None or len(data) != 4:
            raise DelegateInvalidCompatibility(f"named data {SCALE_KEY!r} is missing or not one float")
        return struct.unpack("<f", bytes(data))[0]

    def execute(self, handle: float, args: list) -> None:
        if not isinstance(handle, float):
            raise DelegateInvalidHandle("not a sin delegate handle")
        x, out = args[0], args[-1]
        if not isinstance(x, torch.Tensor) or not isinstance(out, torch.Tensor) or out.shape != x.shape:
            raise DelegateInvalidHandle("sin delegate called with the wrong arguments")
        out.copy_(torch.sin(x) * handle)


def _sin_partitioner():
    # The exporter finds a backend by its BackendDetails subclass name, so the
    # class must exist in the exporting process; it is defined on first use to
    # keep executorch out of processes that only run programs.
    from executorch.exir._serialize._named_data_store import NamedDataStore
    from executorch.exir.backend.backend_details import BackendDetails, PreprocessResult
    from executorch.exir.backend.canonical_partitioners.pattern_op_partitioner import (
        generate_pattern_op_partitions,
    )
    from executorch.exir.backend.partitioner import DelegationSpec, Partitioner, PartitionResult
    from executorch.exir.dialects._ops import ops as exir_ops
    from torch.fx.passes.operator_support import OperatorSupportBase

    global SinDelegate
    if "SinDelegate" not in globals():

        class SinDelegate(BackendDetails):
            @staticmethod
            def preprocess(edge_program, compile_specs) -> PreprocessResult:
                store = NamedDataStore()
                store.add_named_data(SCALE_KEY, struct.pack("<f", SCALE))
                return PreprocessResult(
                    processed_bytes=BLOB_MAGIC, debug_handle_map={},
                    data_store_output=store.get_named_data_store_output(),
                )

        globals()["SinDelegate"] = SinDelegate

    class Support(OperatorSupportBase):
        def is_node_supported(self, submodules, node) -> bool:
            return node.op == "call_function" and node.target == exir_ops.edge.aten.sin.default

    class SinPartitioner(Partitioner):
        def partition(self, edge_program) -> PartitionResult:
            tags = {}
            for partition in generate_pattern_op_partitions(edge_program.graph_module, op_support=Support()):
                tag = f"sin_{partition.id or 0}"
                for node in partition.nodes:
                    node.meta["delegation_tag"] = tag
                tags[tag] = DelegationSpec("SinDelegate", [])
            return PartitionResult(tagged_exported_program=edge_program, partition_tags=tags)

    return [SinPartitioner()]


def sin_backend_registries():
    """The default registries plus the sin backend, for a Runtime of its own."""
    from pterun.backends import default_backend_registry
    from pterun.executor import Registries
    from pterun.kernels import default_registry
    from pterun.runtime import default_allocators

    backends = default_backend_registry()
    backends.register("SinDelegate", SinRuntimeBackend())
    return Registries(default_registry(), backends, default_allocators())


# -- modules ---------------------------------------------------------------------------------------


class Affine(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(x)


class Stateful(torch.nn.Module):
    """A constant weight and a buffer with an initial value that every call advances."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.register_buffer("state", torch.arange(4, dtype=torch.float32) + 1.0)

    def forward(self, x):
        self.state.add_(1.0)
        return self.fc(x) * self.state


class Scale(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("k", torch.tensor([2.0, -1.0, 0.5, 3.0]))

    def forward(self, x, y):
        return torch.cat([x * self.k, y], dim=0).sum(dim=0, keepdim=True) + 1.0


class SinModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(torch.sin(x))


class Trainable(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(2, 2)

    def forward(self, x, label):
        pred = self.fc(x)
        return torch.nn.functional.cross_entropy(pred, label), pred.detach().argmax(dim=1)


def _seeded(module_class):
    torch.manual_seed(0)
    return module_class()


# -- programs --------------------------------------------------------------------------------------


def affine() -> Exported:
    """One method, constants in a constant segment."""
    return export_program("fmt-affine", lambda: ExportSpec(_seeded(Affine), (torch.randn(2, 4),)))


def stateful() -> Exported:
    """Two methods; "forward" has a mutable buffer whose initial value is in a mutable data segment."""
    from executorch.exir.passes.init_mutable_pass import InitializedMutableBufferPass

    def build() -> ExportSpec:
        return ExportSpec(
            {"forward": _seeded(Stateful), "scale": _seeded(Scale)},
            {"forward": (torch.randn(2, 4),), "scale": (torch.randn(3, 4), torch.randn(1, 4))},
            config={"passes": [InitializedMutableBufferPass(["state"])]},
        )

    return export_program("fmt-stateful", build)


def external() -> Exported:
    """Constants stored in a .ptd file."""
    return export_program(
        "fmt-external", lambda: ExportSpec(_seeded(Affine), (torch.randn(2, 4),), config={"external_constants": True})
    )


def delegated(inline: bool) -> Exported:
    """aten.sin lowered to SinDelegate; its blob inline in the flatbuffer or in a segment, its scale as named data."""
    key = "fmt-sin-inline" if inline else "fmt-sin-segment"
    return export_program(
        key,
        lambda: ExportSpec(
            _seeded(SinModel), (torch.randn(2, 4),), lower=_sin_partitioner,
            config={"extract_delegate_segments": not inline},
        ),
    )


def trainable_external() -> Exported:
    """A training program whose weights are mutable, memory-planned, and stored in a .ptd.

    The joint forward-backward graph is made between torch.export and to_edge,
    a step ``export_program`` has no hook for, so this one is exported here.
    """
    inputs = {"forward": (torch.randn(1, 2), torch.ones(1, dtype=torch.int64))}
    with locked("fmt-train-external") as directory:
        pte = directory / "program.pte"
        if not pte.exists():
            from executorch.exir import ExecutorchBackendConfig, to_edge
            from torch.export import export
            from torch.export.experimental import _export_forward_backward

            exported = _export_forward_backward(export(_seeded(Trainable), inputs["forward"], strict=True))
            program = to_edge(exported).to_executorch(config=ExecutorchBackendConfig(external_mutable_weights=True))
            partial = scratch(directory)
            program.write_tensor_data_to_file(str(partial))
            (partial / "program.pte").write_bytes(program.buffer)
            publish(partial, directory)
        return Exported(directory.name, pte, sorted(directory.glob("*.ptd")), inputs)


def inline_constants() -> Path:
    """``affine()`` rewritten with its constants in the deprecated inline ``constant_buffer``, no extended header.

    The exporter always writes a constant segment now; ExecuTorch's serializer
    still has the lower half that writes a Program as one flatbuffer, so the
    program is read back and written out again with its constants inline.
    """
    source = affine().pte
    with locked("fmt-affine-inline") as directory:
        path = directory / "program.pte"
        if path.exists():
            return path
        from executorch.exir._serialize._program import _program_to_flatbuffer, deserialize_pte_binary
        from executorch.exir.schema import SubsegmentOffsets

        program = deserialize_pte_binary(source.read_bytes()).program
        assert len(program.constant_buffer) > 1, "the constants were not restored into constant_buffer"
        program.constant_segment = SubsegmentOffsets(segment_index=0, offsets=[])
        program.segments = []
        partial = scratch(directory)
        (partial / "program.pte").write_bytes(_program_to_flatbuffer(program).data)
        publish(partial, directory)
        return path
