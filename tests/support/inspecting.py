"""Programs exported with an ETRecord, run with ETDump on a runtime, and read back by ExecuTorch's Inspector.

``export_recorded(key, build)`` exports what ``build()`` returns (a :class:`Recorded` spec) once per run,
like ``export_program``, and keeps its ETRecord beside the .pte with the example inputs as representative
inputs (what ``Inspector.calculate_numeric_gap`` runs the exported graph on). ``run_with_etdump`` runs a
program on a runtime whose ``Runtime.get().load_program(..., enable_etdump=, debug_buffer_size=)`` and
``Program.write_etdump_result_to_file`` are ExecuTorch's (ExecuTorch's own, or pterun's).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils._pytree import tree_leaves

from tests.support.compare import FLOAT_RTOL
from tests.support.exporting import locked, publish, scratch

DEBUG_BUFFER = 1 << 24  # room for every intermediate tensor of the test programs, for several runs
# The events ExecuTorch's runtime names itself, outside any instruction.
FRAMEWORK_EVENTS = {"Method::init", "Program::load_method", "Method::execute"}


@dataclass
class Recorded:
    """A module to export with an ETRecord: lowered with ``partitioners()`` (none: no delegate)."""

    module: torch.nn.Module
    inputs: tuple
    dynamic_shapes: Any = None
    partitioners: Callable[[], list] | None = None


@dataclass
class RecordedProgram:
    key: str
    pte: Path
    etrecord: Path
    inputs: tuple

    @property
    def flat_inputs(self) -> list:
        return list(tree_leaves(self.inputs))


def export_recorded(key: str, build: Callable[[], Recorded]) -> RecordedProgram:
    with locked(f"etrecord-{key}") as directory:
        files = (directory / "program.pte", directory / "etrecord.bin", directory / "inputs.pt")
        if not all(f.exists() for f in files):
            partial = scratch(directory)
            _export(build(), *(partial / f.name for f in files))
            publish(partial, directory)
        return RecordedProgram(key, files[0], files[1], torch.load(files[2], weights_only=False))


def _export(spec: Recorded, pte: Path, etrecord: Path, inputs: Path) -> None:
    from executorch.exir import to_edge_transform_and_lower
    from torch.export import export

    with torch.no_grad():
        exported = export(spec.module.eval(), spec.inputs, dynamic_shapes=spec.dynamic_shapes, strict=False)
    partitioners = spec.partitioners() if spec.partitioners else []
    kwargs = {"partitioner": partitioners} if partitioners else {}
    edge = to_edge_transform_and_lower(exported, generate_etrecord=True, **kwargs)
    program = edge.to_executorch()
    record = program.get_etrecord()
    # calculate_numeric_gap runs the exported graph on these (ETRecord keeps none of its own).
    record.update_representative_inputs(list(tree_leaves(spec.inputs)))
    record.save(str(etrecord))
    torch.save(spec.inputs, inputs)
    pte.write_bytes(program.buffer)


def executorch_runtime():
    """ExecuTorch's ``Runtime``, with the kernel libraries the test programs call registered."""
    from tests.support.oracle import _runtime

    _runtime()
    from executorch.runtime import Runtime

    return Runtime


def pterun_runtime():
    from pterun import Runtime

    return Runtime


def run_with_etdump(runtime, program: RecordedProgram | Path, inputs: list, out: Path, *, runs: int = 1,
                    debug_buffer_size: int = DEBUG_BUFFER) -> tuple[Path, Path | None, list]:
    """Runs ``forward`` ``runs`` times with ETDump on ``runtime`` and writes the ETDump (and the debug buffer
    when there is one) under ``out``; returns their paths and the last run's outputs."""
    pte = program.pte if isinstance(program, RecordedProgram) else program
    out.mkdir(parents=True, exist_ok=True)
    loaded = runtime.get().load_program(str(pte), enable_etdump=True, debug_buffer_size=debug_buffer_size)
    method = loaded.load_method("forward")
    outputs = []
    for _ in range(runs):
        outputs = list(method.execute([x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]))
    etdump, debug = out / "run.etdp", out / "run.debug"
    loaded.write_etdump_result_to_file(str(etdump), str(debug))
    return etdump, (debug if debug_buffer_size else None), outputs


def inspector(etdump: Path, etrecord=None, debug: Path | None = None):
    """ExecuTorch's Inspector; ``etrecord`` a path or a parsed ETRecord (whose maps are keyed by strings, as the
    Inspector looks them up: one fresh from the exporter is keyed by integers and would match no event)."""
    from executorch.devtools import Inspector

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a missing debug buffer, tensors over read-only bytes
        return Inspector(etdump_path=str(etdump), etrecord=str(etrecord) if isinstance(etrecord, Path) else etrecord,
                         debug_buffer_path=str(debug) if debug else None)


@dataclass(frozen=True)
class Row:
    """One Inspector event, without its timings."""

    block: str
    name: str
    instruction: int | None
    delegated: bool
    identifier: Any
    debug: tuple  # (dtype, shape) of each tensor the event logged; a scalar as its Python type

    def __str__(self) -> str:
        where = f"#{self.instruction}" if self.instruction is not None else ""
        return f"{self.block}:{self.name}{where}{' (delegated)' if self.delegated else ''} {self.debug}"


def _described(value) -> Any:
    if isinstance(value, torch.Tensor):
        return (str(value.dtype), tuple(value.shape))
    if isinstance(value, (list, tuple)):
        return tuple(_described(v) for v in value)
    return type(value).__name__


def rows(inspected) -> list[Row]:
    """Every event of every event block, in the Inspector's order."""
    return [
        Row(block.name, event.name, event._instruction_id, bool(event.is_delegated_op),
            event.delegate_debug_identifier, tuple(_described(v) for v in event.debug_data or ()))
        for block in inspected.event_blocks for event in block.events
    ]


def timed(inspected) -> list[str]:
    """The events that carry no timing (every profiling event must carry one)."""
    return [f"{b.name}:{e.name}" for b in inspected.event_blocks for e in b.events
            if e.perf_data is None and not e.debug_data]


def numeric_gap(inspected, comparator=None, **kwargs):
    """``calculate_numeric_gap`` by mean squared error, with the exporter's warnings silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return inspected.calculate_numeric_gap(comparator or "MSE", **kwargs)


def reshaping_mse():
    """MSE where the two sides hold as many elements in different shapes; NaN where they do not.

    The Inspector pairs an exported operator with the last instruction carrying its debug handle; for an
    operator the exporter decomposed (``matmul`` into ``bmm`` and a view that logs nothing) that is an
    intermediate of another shape, and on transformers' models ExecuTorch's own runtime makes
    ``calculate_numeric_gap("MSE")`` raise. Compared this way, the rest of the table stays comparable.
    """
    from executorch.devtools.inspector._inspector_utils import convert_to_float_tensor
    from executorch.devtools.inspector.numerical_comparator import MSEComparator

    class ReshapingMSE(MSEComparator):
        def element_compare(self, a, b) -> float:
            a, b = convert_to_float_tensor(a), convert_to_float_tensor(b)
            if a.numel() != b.numel():
                return float("nan")
            return float(torch.mean(torch.square(a.reshape(-1) - b.reshape(-1))))

    return ReshapingMSE()


def gap_rows(frame) -> list[tuple]:
    """What identifies each row of a gap table: the operators and debug handles on both sides."""
    return [(tuple(r.aot_debug_handle), tuple(r.aot_ops), tuple(r.runtime_debug_handle), tuple(r.runtime_ops))
            for r in frame.itertuples()]


def gap_bound(reference) -> float:
    """The largest MSE the test corpus's float32 tolerance allows against ``reference``: every element within
    ``FLOAT_RTOL * max(1, max|reference|)`` (tests/support/compare.py)."""
    tensors = [reference] if isinstance(reference, torch.Tensor) else [
        v for v in reference if isinstance(v, torch.Tensor)]
    peak = max([t.double().abs().max().item() for t in tensors if t.numel()] + [1.0])
    return (FLOAT_RTOL * peak) ** 2
