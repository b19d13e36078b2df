"""PterunCudaBackend: runs the programs `pterun.export.CudaPartitioner` nests in its delegate blobs.

Each blob is a complete program for one subgraph. It is loaded once, with
every arena and constant on the delegate's device (the ``target_device``
compile spec, "cuda:0" by default), by the same executor that runs the outer
program. The nested method's inputs and outputs are unplanned, so on each
call they are bound to the outer method's tensors: inputs are read where they
are and results are written straight into the outer outputs, with no copy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from pterun.backends.interface import BackendInterface
from pterun.errors import DelegateInvalidCompatibility, InvalidProgram, InvalidState

BACKEND_ID = "PterunCudaBackend"


@dataclass
class _Handle:
    method: Any  # the nested program's Method (the executor's, a layer above backends)
    inputs: int
    bound: list = field(default_factory=list)  # per output: the outer tensor bound to it, or None
    copied: set = field(default_factory=set)  # outputs the nested method does not write in place


class PterunCudaBackend(BackendInterface):
    def is_available(self) -> bool:
        return torch.cuda.is_available()

    def init(self, context, processed, compile_specs) -> _Handle:
        specs = {spec.key: spec.value for spec in compile_specs}
        device = torch.device(specs.get("target_device", b"cuda:0").decode())
        if device.type != "cuda":
            raise DelegateInvalidCompatibility(f"{BACKEND_ID}: target_device is {device}, not a CUDA device")
        if context.load_program is None:
            raise DelegateInvalidCompatibility(f"{BACKEND_ID}: this runtime cannot load nested programs")
        method = context.load_program(processed, device).load_method("forward")
        meta = method.metadata
        return _Handle(method, meta.num_inputs(), [None] * meta.num_outputs())

    def written_arguments(self, handle: _Handle, args) -> list[int]:
        """The outer values the nested method writes: its outputs, and any input it updates in place."""
        n, outputs, count = handle.inputs, len(handle.bound), len(args)
        if count != n + outputs:
            raise InvalidProgram(
                f"{BACKEND_ID}: the nested method takes {n} inputs and {outputs} outputs; "
                f"the call passes {count} values"
            )
        return sorted(handle.method.written_inputs) + list(range(n, count))

    def execute(self, handle: _Handle, args: list) -> None:
        method, n = handle.method, handle.inputs
        method.set_inputs(args[:n])
        for i, out in enumerate(args[n:]):
            if out is not handle.bound[i] and i not in handle.copied:
                try:
                    method.set_output(i, out)
                    handle.bound[i] = out
                except InvalidState:
                    handle.copied.add(i)  # planned, or a view the method computes: copy the result
        method.run()
        if handle.copied:
            results = method.get_outputs(clone_outputs=False)
            for i in handle.copied:
                out, result = args[n + i], results[i]
                if out.shape != result.shape:
                    out.resize_(result.shape)
                out.copy_(result)
