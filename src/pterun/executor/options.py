"""LoadOptions: how a program's methods are loaded and run, written once.

``Runtime.load_program``'s keyword arguments, ``Program``'s and every method's load all read this one
object; a program nested in a delegate blob is loaded with ``dataclasses.replace(options, ...)``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from pterun.core.device import Device
from pterun.executor.cache import LoadCache
from pterun.executor.etdump import ProgramTrace


@dataclass(frozen=True)
class LoadOptions:
    """The options a program is loaded with; the defaults are ``Runtime.load_program``'s."""

    device: Device | None = None  # run every method on this device, whatever the plan says
    backend_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # per backend id: runtime specs
    cuda_graphs: bool = True  # replay CUDA methods as captured graphs (call/graphs.py)
    compile: bool = False  # run methods through torch.compile (codegen/functional.py)
    allow_tf32: bool = False  # float32 products and convolutions may use TF32 on CUDA (call/precision.py)
    fuse: bool = True  # decomposed chains run as one fused kernel each (load/fuse/)
    num_threads: int | None = None  # intra-op threads per call; None: chosen per method (call/threads.py)
    cache: LoadCache | None = None  # compiled code kept between loads (cache.py); None: off
    trace: ProgramTrace | None = None  # profiling: every run's events (and values) for an ETDump (etdump.py)
    device_positions: bool | None = None  # start positions stay on the device (load/fuse/positions.py); None: on CUDA
    share_state: bool = True  # methods share the state planned for sharing (load/shared.py)
    trust_native_code: bool = False  # delegates whose blobs are native code may load (docs/trust.md)


NAMES = frozenset(f.name for f in fields(LoadOptions))
