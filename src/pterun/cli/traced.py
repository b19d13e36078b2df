"""Loading and running a method with ETDump on, for `pterun profile` and `pterun compare`."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from pterun import MethodMeta, Runtime
from pterun.cli.inputs import drawn_inputs, load_inputs, random_inputs
from pterun.executor.etdump import ALIGNMENT
from pterun.format.etdump import RunBlock, read_etdump


def runtime() -> Runtime:
    """The runtime the commands load with (tests put one with their own backends here)."""
    return Runtime.get()


@dataclass
class Inputs:
    values: list
    source: str  # where they came from, said to the user: the file, or "random, seed N"


def method_inputs(meta, path: Path | None, device: str, seed: int, *, program=None, method: str = "") -> Inputs:
    """The inputs in ``path``, else random ones drawn from the method's metadata ``meta`` with ``seed`` (valid
    ones for a language model's decoder, given its ``program``)."""
    if path is not None:
        return Inputs(load_inputs(path, device), str(path))
    if program is not None:
        return Inputs(*drawn_inputs(program, method, meta, device, seed))
    return Inputs(random_inputs(meta, device, seed), f"random, seed {seed}")


def debug_buffer_estimate(meta: MethodMeta) -> int:
    """Room in the debug buffer for every tensor of the method logged once, and as much again for the values
    delegates compute inside (which the plan does not list)."""
    values = sum(meta.tensor_meta(v).nbytes() + ALIGNMENT for v in meta.tensors())
    return 2 * values + (1 << 20)


def recorded(program, *, keep_debug: bool = False) -> tuple[list[RunBlock], bytes, bytes | None]:
    """What ``program`` (loaded with ``enable_etdump=True``) recorded since the last call: its ETDump's blocks,
    the ETDump's bytes and (``keep_debug``) the debug buffer's; the recording starts afresh."""
    with tempfile.TemporaryDirectory(prefix="pterun-etdump-") as tmp:
        dump, debug = Path(tmp) / "run.etdp", Path(tmp) / "run.debug"
        program.write_etdump_result_to_file(dump, debug if keep_debug else None)
        if not dump.exists():  # nothing recorded
            return [], b"", None
        data = dump.read_bytes()
        debug_bytes = debug.read_bytes() if keep_debug and debug.exists() else None
    return read_etdump(data), data, debug_bytes
