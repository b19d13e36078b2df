"""Export programs with ExecuTorch's exporter, once per test run.

``export_program(key, build)`` calls ``build()`` for an :class:`ExportSpec`,
exports it and writes the .pte (and any .ptd files) under the cache
directory, keyed by ``key``; later calls with the same key reuse the files.
The cache lives in ``$PTERUN_PROGRAM_CACHE`` when that is set (handy while
developing, and for carrying fixtures to a GPU machine), else in a temporary
directory that tests/conftest.py makes for the run and shares with its xdist
workers.

Several processes (xdist workers, two runs on one ``$PTERUN_PROGRAM_CACHE``)
may want one key at once: :func:`locked` holds a key against every other
thread and process, and an export is written into a scratch directory that
:func:`publish` renames into place, so nobody reads half a program and an
export cut short leaves nothing that looks finished.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from filelock import FileLock

_LOCK = threading.RLock()  # one export at a time in a process; reentrant: a build may need another key
_ROOT: Path | None = None


def cache_root() -> Path:
    global _ROOT
    if _ROOT is None:
        env = os.environ.get("PTERUN_PROGRAM_CACHE")
        _ROOT = Path(env) if env else Path(tempfile.mkdtemp(prefix="pterun-programs-"))
        _ROOT.mkdir(parents=True, exist_ok=True)
    return _ROOT


def use_root(path: Path) -> None:
    """Makes ``path`` this process's cache (tests/conftest.py: one directory for a run and its workers)."""
    global _ROOT
    path.mkdir(parents=True, exist_ok=True)
    _ROOT = path


@contextmanager
def locked(key: str) -> Iterator[Path]:
    """``key``'s directory in the cache, held against other threads and processes making it."""
    root = cache_root()
    locks = root / ".locks"
    locks.mkdir(parents=True, exist_ok=True)  # a fresh cache: its root is made here too
    with _LOCK, FileLock(locks / f"{key}.lock"):
        yield root / key


def scratch(final: Path) -> Path:
    """An empty directory beside ``final`` to export into (call while holding ``final``'s key)."""
    partial = final.with_name(f".{final.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)  # left by an export cut short
    partial.mkdir(parents=True)
    return partial


def publish(partial: Path, final: Path) -> None:
    """Puts a finished export in place in one step (call while holding ``final``'s key)."""
    if final.is_dir():  # an unfinished export from before exports were published this way
        shutil.rmtree(final)
    partial.rename(final)


@dataclass
class ExportSpec:
    """What to export: one module (method "forward") or several methods, and how."""

    module: torch.nn.Module | dict[str, torch.nn.Module]
    inputs: tuple | dict[str, tuple]
    dynamic_shapes: Any = None
    # "portable" (to_edge), "transform" (to_edge_transform_and_lower, no partitioner),
    # or a callable returning a list of partitioners for to_edge_transform_and_lower.
    lower: str | Callable[[], list] = "portable"
    config: dict = field(default_factory=dict)  # ExecutorchBackendConfig keyword arguments
    edge_config: dict = field(default_factory=dict)  # EdgeCompileConfig keyword arguments
    strict: bool = False
    passes: Callable | None = None  # edge program manager -> edge program manager, before to_executorch
    constant_methods: dict[str, Any] = field(default_factory=dict)  # methods that return a fixed value


@dataclass
class Exported:
    key: str
    pte: Path
    ptd: list[Path]
    inputs: dict[str, tuple]  # example inputs per method

    @property
    def method_names(self) -> list[str]:
        return list(self.inputs)

    def forward_inputs(self) -> tuple:
        return self.inputs["forward"]


def _export(spec: ExportSpec, directory: Path) -> None:
    from executorch.exir import EdgeCompileConfig, ExecutorchBackendConfig, to_edge, to_edge_transform_and_lower
    from torch.export import export

    modules = spec.module if isinstance(spec.module, dict) else {"forward": spec.module}
    inputs = spec.inputs if isinstance(spec.inputs, dict) else {"forward": spec.inputs}
    dynamic = spec.dynamic_shapes if isinstance(spec.dynamic_shapes, dict) and set(spec.dynamic_shapes) <= set(
        modules
    ) and isinstance(spec.module, dict) else {"forward": spec.dynamic_shapes}
    with torch.no_grad():
        exported = {
            name: export(module.eval(), inputs[name], dynamic_shapes=dynamic.get(name), strict=spec.strict)
            for name, module in modules.items()
        }
    edge_config = EdgeCompileConfig(**spec.edge_config) if spec.edge_config else None
    if spec.lower == "portable":
        kwargs = {"constant_methods": spec.constant_methods} if spec.constant_methods else {}
        if edge_config:
            kwargs["compile_config"] = edge_config
        edge = to_edge(exported, **kwargs)
    else:
        partitioners = [] if spec.lower == "transform" else spec.lower()
        kwargs = {"partitioner": partitioners} if partitioners else {}
        if spec.constant_methods:
            kwargs["constant_methods"] = spec.constant_methods
        if edge_config:
            kwargs["compile_config"] = edge_config
        edge = to_edge_transform_and_lower(exported, **kwargs)
    if spec.passes is not None:
        edge = spec.passes(edge)
    program = edge.to_executorch(config=ExecutorchBackendConfig(**spec.config))
    (directory / "program.pte").write_bytes(program.buffer)
    if getattr(program, "_tensor_data", None):
        program.write_tensor_data_to_file(str(directory))
    torch.save(inputs, directory / "inputs.pt")


def export_program(key: str, build: Callable[[], ExportSpec]) -> Exported:
    with locked(key) as directory:
        pte = directory / "program.pte"
        if not (pte.exists() and (directory / "inputs.pt").exists()):
            partial = scratch(directory)
            _export(build(), partial)
            publish(partial, directory)
        inputs = torch.load(directory / "inputs.pt", weights_only=False)
        return Exported(key, pte, sorted(directory.glob("*.ptd")), inputs)
