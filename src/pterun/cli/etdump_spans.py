"""What an ETDump says about where a method's time went: a table of operators, and a trace for a browser.

Both read the "Execute" blocks of an ETDump (``pterun.format.etdump.read_etdump``, pterun's or ExecuTorch's)
with the method's instructions (``MethodMeta.instructions()``), which name each one: its operator
(``aten::add.out``), its delegate's backend, or the format's instruction (``MOVE_CALL``). Each block is one
run of the method. A delegate that reports its nodes (pterun's XNNPACK and WebGPU backends do) gives events
inside its ``DELEGATE_CALL``; they are rows and trace events under their delegate.

Nothing here needs the command line: ``profile_rows(blocks, instructions)`` and ``chrome_trace(blocks,
instructions, ...)`` serve any caller that has an ETDump.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from pterun.format import INSTRUCTION_EVENTS
from pterun.format.etdump import ProfileEvent, RunBlock

# Rows and trace events count INSTRUCTION_EVENTS, those ExecuTorch's runtime records for a whole instruction
# (the kernel's own event, recorded inside OPERATOR_CALL with the same span, is left out so that no time
# counts twice).
Instructions = Sequence[tuple[str, str]]  # per instruction, its name and category (MethodMeta.instructions())
METHOD_EVENT = "Method::execute"
_NUMBER = re.compile(r" #\d+")  # "XNNConv2d #3": the node's number among the blob's nodes of its type


@dataclass
class Row:
    """One operator (or delegate, or node inside a delegate) summed over every run."""

    name: str
    kind: str  # "operator", "delegate", "node" (inside ``parent``), or "instruction" (MOVE_CALL, ...)
    count: int = 0
    total_ns: int = 0
    parent: str | None = None  # a node's delegate (its backend's name)

    @property
    def mean_ns(self) -> float:
        return self.total_ns / self.count if self.count else 0.0


@dataclass
class Profile:
    runs: int  # the method's "Execute" blocks
    method_ns: int  # the method's time over all runs (its Method::execute spans)
    rows: list[Row] = field(default_factory=list)  # by total time, each delegate followed by its nodes

    def share(self, row: Row) -> float:
        """The part of the method's time ``row`` took."""
        return row.total_ns / self.method_ns if self.method_ns else 0.0

    @property
    def top_level(self) -> list[Row]:
        """The rows outside any delegate: their times do not overlap."""
        return [r for r in self.rows if r.parent is None]

    def explained(self, rows: Sequence[Row] | None = None) -> float:
        """The part of the method's time ``rows`` (all of them by default) account for; nodes are inside
        their delegate's time, so only rows outside delegates count."""
        chosen = self.top_level if rows is None else [r for r in rows if r.parent is None]
        return sum(self.share(r) for r in chosen)

    def limited(self, top: int | None) -> list[Row]:
        """The ``top`` slowest rows outside delegates (all when None or 0), each delegate with its nodes."""
        keep = {id(r) for r in self.top_level[:top or None]}
        parents = {r.name for r in self.top_level if id(r) in keep and r.kind == "delegate"}
        return [r for r in self.rows if id(r) in keep or (r.parent is not None and r.parent in parents)]


def instruction_name(instructions: Instructions, index: int) -> tuple[str, str]:
    """What instruction ``index`` is called in tables, and its category."""
    if not 0 <= index < len(instructions):
        return f"instruction {index}", "instruction"
    return instructions[index]


def node_label(event: ProfileEvent) -> str:
    """A delegate node's name: what its delegate wrote in the event's metadata, else its identifier."""
    if event.metadata:
        return event.metadata.decode("utf-8", "replace")
    if event.delegate_name is not None:
        return event.delegate_name
    return f"debug handle {event.delegate_id}"


def is_node(event: ProfileEvent) -> bool:
    return event.delegate_id >= 0 or event.delegate_name is not None


def runs(blocks: Sequence[RunBlock]) -> Iterator[RunBlock]:
    return (b for b in blocks if b.name == "Execute")


def profile_rows(blocks: Sequence[RunBlock], instructions: Instructions) -> Profile:
    """The operators of the method's runs in ``blocks``, by total time: counts are runs x occurrences.

    Nodes inside a delegate are summed by their type (their names without the ``#n`` numbering), under
    the delegate's backend."""
    rows: dict[tuple[str | None, str], Row] = {}
    total = count = 0
    for block in runs(blocks):
        for e in block.events:
            if not isinstance(e, ProfileEvent):
                continue
            if e.name == METHOD_EVENT:
                total += e.end - e.start
                count += 1
                continue
            if e.instruction < 0:
                continue
            if is_node(e):
                parent = instruction_name(instructions, e.instruction)[0]
                key, kind = (parent, _NUMBER.sub("", node_label(e))), "node"
            elif e.name in INSTRUCTION_EVENTS:
                name, kind = instruction_name(instructions, e.instruction)
                parent = None
                key = (None, name if kind != "instruction" else e.name)
            else:
                continue
            row = rows.get(key)
            if row is None:
                row = rows[key] = Row(key[1], kind, parent=parent)
            row.count += 1
            row.total_ns += e.end - e.start
    ordered: list[Row] = []
    by_time = sorted(rows.values(), key=lambda r: -r.total_ns)
    for row in (r for r in by_time if r.parent is None):
        ordered.append(row)
        if row.kind == "delegate":
            ordered += [r for r in by_time if r.parent == row.name]
    return Profile(count, total, ordered)


def chrome_trace(blocks: Sequence[RunBlock], instructions: Instructions, *, program: str, method: str,
                 extra: dict | None = None) -> dict:
    """The runs in ``blocks`` in Chrome's trace event format (chrome://tracing, ui.perfetto.dev): one track,
    each run a complete ("X") event holding its instructions, each delegate call holding its nodes.
    Times are microseconds from the first run's start."""
    events: list[dict] = [
        {"ph": "M", "pid": 1, "tid": 1, "name": "process_name", "args": {"name": program}},
        {"ph": "M", "pid": 1, "tid": 1, "name": "thread_name", "args": {"name": method}},
    ]
    spans = [(i, e) for i, block in enumerate(runs(blocks)) for e in block.events if isinstance(e, ProfileEvent)]
    origin = min((e.start for _, e in spans), default=0)

    def complete(name: str, category: str, e: ProfileEvent, args: dict) -> dict:
        return {"ph": "X", "pid": 1, "tid": 1, "name": name, "cat": category, "ts": (e.start - origin) / 1e3,
                "dur": (e.end - e.start) / 1e3, "args": args}

    for run, e in spans:
        if e.name == METHOD_EVENT:
            events.append(complete(method, "method", e, {"run": run}))
        elif e.instruction < 0:
            continue
        elif is_node(e):
            delegate = instruction_name(instructions, e.instruction)[0]
            args = {"run": run, "instruction": e.instruction, "delegate": delegate}
            if e.delegate_id >= 0:
                args["debug_handle"] = e.delegate_id
            events.append(complete(node_label(e), "delegate node", e, args))
        elif e.name in INSTRUCTION_EVENTS:
            name, kind = instruction_name(instructions, e.instruction)
            events.append(complete(name if kind != "instruction" else e.name, e.name, e,
                                   {"run": run, "instruction": e.instruction}))
    # Parents first where spans start together, so viewers nest them.
    events[2:] = sorted(events[2:], key=lambda ev: (ev["ts"], -ev["dur"]))
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"program": program, "method": method, **(extra or {})}}
