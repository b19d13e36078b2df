"""The references `pterun compare` holds pterun's values against: ExecuTorch's runtime, and an ETRecord.

An ETRecord (written at export with ``generate_etrecord=True``) holds the exported graph. Its intermediate
values come from ExecuTorch's Inspector: ``calculate_numeric_gap`` runs the graph on the ETRecord's
representative inputs and pairs each operator's value with the one the runtime logged in its ETDump
(through the ETRecord's map of instructions to debug handles). The comparator below keeps those pairs
instead of reducing them to one number, so that each gets max abs, relative error and SNR.

Nodes inside a delegate: where the ETRecord maps a delegate's identifiers to debug handles (ExecuTorch's
demo backend does) the Inspector pairs them itself. XNNPACK's ETRecord maps none; pterun's XNNPACK
backend reports each node with its ``XNode.debug_handle``, which the exporter copied from the exported
graph's node, so a node whose identifier the ETRecord does not map is paired by that handle. The exporter
fuses an activation into the node before it (a convolution's ReLU becomes its output range) and keeps the
node's handle: the node's value is the activation's. In a quantized graph a node's 8-bit output stands for
the quantize-dequantize pair after it (pterun logs it dequantized). So a node's handles run on through such
nodes that no event reports, and it is compared with the last.
"""

from __future__ import annotations

import tempfile
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.utils._pytree import tree_leaves

from pterun.cli.report import UserError, first_line
from pterun.cli.ways import executorch_module

FORWARD = "forward"  # the one method the Inspector reads from an ETRecord


def executorch_outputs(path: Path, data: list[Path], method: str, args: list) -> list:
    """``method``'s outputs on ExecuTorch's runtime."""
    return executorch_module(path, data, method, args)[2]


@dataclass
class Pair:
    """One operator (or delegate node) of the reference graph, and the value the runtime logged for it."""

    handles: tuple[int, ...]
    reference_names: list[str]  # the exported graph's nodes
    runtime_name: str  # the event's name: a kernel's, or a delegate node's
    delegate: str | None  # the delegate's backend, for a node inside one
    reference: object
    value: object
    # One of several outputs of one event (a delegate call), which the Inspector pairs with the graph's last
    # values by position: they may not be the same value, so such a row is shown and not judged.
    by_position: bool = False


class Record:
    """An ETRecord file, read; ``UserError`` when it is not one, or ExecuTorch is not installed."""

    def __init__(self, path: Path) -> None:
        where = f"--etrecord {str(path)!r}"
        if not path.exists():
            raise UserError(f"{where}: no such file")
        try:
            from executorch.devtools.etrecord import parse_etrecord
        except ImportError:
            raise UserError("--etrecord needs ExecuTorch's devtools installed (pip install 'pterun[test]')") from None
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self.etrecord = parse_etrecord(str(path))
        except Exception as exc:  # noqa: BLE001 - ExecuTorch raises anything from a bad zip to a KeyError
            raise UserError(f"{where}: is not an ETRecord ({first_line(exc)})") from None
        self.where = where

    @property
    def inputs(self) -> list | None:
        """The representative inputs the ETRecord holds (the first set, where a bundled program gave several),
        as a flat list of values; None when it holds none."""
        held = self.etrecord._representative_inputs
        if not held:
            return None
        return list(tree_leaves(held[0] if isinstance(held[0], (list, tuple)) else held))

    def use_inputs(self, inputs: list) -> None:
        """Runs the reference graph on ``inputs`` (the values pterun runs on) from now on."""
        self.etrecord.update_representative_inputs([x.cpu() if isinstance(x, torch.Tensor) else x for x in inputs])

    def outputs(self, inputs: list) -> list:
        """The exported program's outputs on ``inputs``, in eager PyTorch."""
        program = self.etrecord.exported_program or self.etrecord.edge_dialect_program
        if isinstance(program, dict):
            program = program.get(FORWARD)
        if program is None:
            raise UserError(f"{self.where}: holds no exported program to compute the reference outputs with")
        host = [x.cpu() if isinstance(x, torch.Tensor) else x for x in inputs]
        with torch.no_grad():
            return list(tree_leaves(program.module()(*host)))

    def _edge_graph(self):
        """The edge dialect graph, whose nodes carry the debug handles a delegate's nodes report."""
        program = self.etrecord.edge_dialect_program
        if isinstance(program, dict):
            program = program.get(FORWARD)
        return program.graph

    def pairs(self, etdump: bytes, debug_buffer: bytes) -> list[Pair]:
        """Every operator of the reference graph the runtime logged a value for, in graph order."""
        from executorch.devtools import Inspector
        from executorch.devtools.inspector._inspector_utils import find_op_names

        with tempfile.TemporaryDirectory(prefix="pterun-compare-") as tmp:
            dump, debug = Path(tmp) / "run.etdp", Path(tmp) / "run.debug"
            dump.write_bytes(etdump)
            debug.write_bytes(debug_buffer)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                inspector = Inspector(etdump_path=str(dump), etrecord=self.etrecord, debug_buffer_path=str(debug))
        nodes = _pair_nodes_by_handle(inspector, self._edge_graph())
        capture = _capture()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                inspector.calculate_numeric_gap(capture)
        except ValueError as exc:
            raise UserError(f"{self.where}: cannot pair its graph with the run ({first_line(exc)})") from None
        shared = Counter(tuple(handle) for handle, _ in capture.mapping.values())
        pairs = []
        for (aot_handle, reference), (runtime_handle, value) in capture.mapping.items():
            runtime_names = capture.runtime_names.get(runtime_handle) or ["?"]
            node = nodes.get(tuple(runtime_handle))
            pairs.append(Pair(tuple(aot_handle), find_op_names(aot_handle, capture.aot_names),
                              node[0] if node else runtime_names[0], node[1] if node else None, reference, value,
                              by_position=shared[tuple(runtime_handle)] > 1))
        return sorted(pairs, key=lambda p: (min(p.handles), len(p.handles)))


def _pair_nodes_by_handle(inspector, graph) -> dict[tuple[int, ...], tuple[str, str]]:
    """Gives each delegate node the ETRecord maps to no debug handle its own identifier as its handle, and the
    handles of the activations the exporter fused into it (see the module's docstring); returns, by handles,
    each delegate node's name and its delegate's backend."""
    events = [event for block in inspector.event_blocks for event in block.events]
    unmapped = [e for e in events if e.is_delegated_op and not e.debug_handles
                and isinstance(e.delegate_debug_identifier, int)]
    for event in unmapped:
        event.debug_handles = (event.delegate_debug_identifier,)
        event.op_types = event.op_types or [str(event.delegate_debug_identifier)]
    reported = {h for e in events if e.debug_data and e.debug_handles is not None and e.name != "DELEGATE_CALL"
                for h in _handles(e.debug_handles)}
    for event in unmapped:
        data = event.debug_data or []
        logged_float = bool(data) and isinstance(data[0], torch.Tensor) and data[0].is_floating_point()
        event.debug_handles = _through_fused(event.debug_handles, graph, reported, logged_float)
    nodes = {}
    for event in events:
        if event.is_delegated_op and event.debug_handles is not None:
            raw = event.raw_delegate_debug_metadatas
            name = raw[0].decode("utf-8", "replace") if raw and isinstance(raw[0], bytes) else event.name
            nodes[_handles(event.debug_handles)] = (name, event.delegate_backend_name or "delegate")
    return nodes


def _handles(handles) -> tuple[int, ...]:
    return (handles,) if isinstance(handles, int) else tuple(handles)


# Operators XNNPACK's exporter folds into the node before them (as its output range).
_ACTIVATIONS = ("relu", "hardtanh", "clamp")


def _through_fused(handles: tuple[int, ...], graph, reported: set[int], logged_float: bool) -> tuple[int, ...]:
    """``handles`` and those of the graph's nodes after the last one whose value the node computes, none of
    which any event reports, each the only user of the one before: activations the exporter fused into it,
    and a quantize-dequantize pair when the node's value was logged dequantized (``logged_float``)."""
    by_handle = {n.meta["debug_handle"]: n for n in graph.nodes
                 if n.op == "call_function" and isinstance(n.meta.get("debug_handle"), int)}

    def follower(node):
        """The unreported node that alone reads ``node``, with its handle; None when there is none."""
        if node is None or len(node.users) != 1:
            return None
        user = next(iter(node.users))
        handle = user.meta.get("debug_handle")
        return user if by_handle.get(handle) is user and handle not in reported else None

    out = list(handles)
    node = by_handle.get(out[-1])
    while (user := follower(node)) is not None:
        name = str(user.target)
        if any(a in name for a in _ACTIVATIONS):
            chain = [user]
        elif logged_float and "quantize_per" in name and "dequantize" not in name and (
                (after := follower(user)) is not None and "dequantize_per" in str(after.target)):
            chain = [user, after]
        else:
            break
        out += [n.meta["debug_handle"] for n in chain]
        node = chain[-1]
    return tuple(out)


def _capture():
    """A comparator that keeps the Inspector's pairs of reference and runtime values instead of reducing each
    to one distance (ExecuTorch is imported only when an ETRecord is compared)."""
    from executorch.devtools.inspector.numerical_comparator import NumericalComparatorBase

    class Capture(NumericalComparatorBase):
        mapping: dict = {}
        aot_names: dict = {}
        runtime_names: dict = {}

        def element_compare(self, a, b) -> float:
            return 0.0

        def compare(self, mapping, aot_debug_handle_to_op_names, runtime_debug_handle_to_op_names):
            import pandas as pd

            self.mapping = dict(mapping)
            self.aot_names = aot_debug_handle_to_op_names
            self.runtime_names = runtime_debug_handle_to_op_names
            return pd.DataFrame()

    return Capture()
