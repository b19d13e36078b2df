"""CudaPartitioner: delegate subgraphs to pterun's CUDA backend, with device-tagged inputs and outputs.

Each claimed subgraph is compiled ahead of time into a program of its own (a
.pte nested in the delegate blob) that pterun's executor runs on the GPU. The
partitioner writes the ``target_device`` compile spec, so ExecuTorch's
device passes tag the delegate's inputs and outputs with the device, plan
their memory there, and insert the host/device copies around it; with
``PropagateDeviceConfig(skip_h2d_for_method_inputs=True,
skip_d2h_for_method_outputs=True)`` and ``MemoryPlanningPass(
alloc_graph_input=False, alloc_graph_output=False)`` the method's inputs and
outputs stay on the GPU instead (see :func:`device_resident_config`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from executorch.exir import EdgeProgramManager, ExecutorchBackendConfig
from executorch.exir.backend.backend_details import BackendDetails, PreprocessResult
from executorch.exir.backend.canonical_partitioners.pattern_op_partitioner import generate_pattern_op_partitions
from executorch.exir.backend.compile_spec_schema import CompileSpec
from executorch.exir.backend.partitioner import DelegationSpec, Partitioner, PartitionResult
from executorch.exir.backend.utils import tag_constant_data
from executorch.exir.passes import MemoryPlanningPass
from executorch.exir.passes.propagate_device_config import PropagateDeviceConfig
from torch.fx.passes.operator_support import OperatorSupportBase

BACKEND_ID = "PterunCudaBackend"
TARGET_DEVICE = "target_device"


class PterunCudaBackend(BackendDetails):
    """Compiles a subgraph into a nested program; the runtime side runs it with pterun on the device.

    ExecuTorch finds a backend by its class name, which is the id written into the program.
    """

    @staticmethod
    def preprocess(edge_program, compile_specs: list[CompileSpec]) -> PreprocessResult:
        # The nested program's inputs and outputs are the delegate's: the runtime binds them to the
        # outer method's tensors, so planning memory for them would only add copies.
        config = ExecutorchBackendConfig(
            memory_planning_pass=MemoryPlanningPass(alloc_graph_input=False, alloc_graph_output=False),
        )
        nested = EdgeProgramManager({"forward": edge_program}).to_executorch(config)
        return PreprocessResult(processed_bytes=nested.buffer)


class _Supported(OperatorSupportBase):
    def __init__(self, accept: Callable[[torch.fx.Node], bool]) -> None:
        self.accept = accept

    def is_node_supported(self, submodules, node: torch.fx.Node) -> bool:
        return node.op == "call_function" and self.accept(node)


def _any_compute(node: torch.fx.Node) -> bool:
    return True


class CudaPartitioner(Partitioner):
    """Claims the nodes ``supports`` accepts (all compute nodes by default) for ``device``."""

    def __init__(self, device: str = "cuda:0", supports: Callable[[torch.fx.Node], bool] | None = None) -> None:
        super().__init__()
        self.device = torch.device(device)
        if self.device.type != "cuda":
            raise ValueError(f"CudaPartitioner targets a CUDA device, not {device!r}")
        spec = f"cuda:{self.device.index or 0}".encode()
        self.delegation_spec = DelegationSpec(BACKEND_ID, [CompileSpec(TARGET_DEVICE, spec)])
        self.support = _Supported(supports or _any_compute)

    def partition(self, exported_program) -> PartitionResult:
        tags = {}
        for partition in generate_pattern_op_partitions(exported_program.graph_module, op_support=self.support):
            tag = f"pterun_cuda_{partition.id}"
            for node in partition.nodes:
                node.meta["delegation_tag"] = tag
            tags[tag] = self.delegation_spec
        # Weights used only inside a delegate belong to it: they are compiled into the nested
        # program and copied to the device once, instead of crossing it on every call.
        tag_constant_data(exported_program)
        return PartitionResult(tagged_exported_program=exported_program, partition_tags=tags)


def device_resident_options() -> dict:
    """ExecutorchBackendConfig arguments that keep method inputs and outputs on the device (no copies)."""
    return dict(
        propagate_device_config=PropagateDeviceConfig(
            skip_h2d_for_method_inputs=True, skip_d2h_for_method_outputs=True
        ),
        enable_non_cpu_memory_planning=True,
        memory_planning_pass=MemoryPlanningPass(alloc_graph_input=False, alloc_graph_output=False),
    )


def device_resident_config(**overrides) -> ExecutorchBackendConfig:
    """The to_executorch config that keeps method inputs and outputs on the device."""
    return ExecutorchBackendConfig(**{**device_resident_options(), **overrides})
