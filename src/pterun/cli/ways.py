"""The ways `pterun bench` can run a program: pterun itself, ExecuTorch's runtime, eager PyTorch."""

from __future__ import annotations

import importlib
from pathlib import Path

import torch

from pterun.cli.timing import Way


def pterun_ways(method, args: list, device: str) -> list[Way]:
    cuda = device.startswith("cuda")

    def call():
        return method.execute(args, clone_outputs=False)

    return [Way("pterun", call, cuda)]


def _executorch(path: Path, data: list[Path], method: str, args: list) -> Way:
    try:
        from executorch.extension.pybindings import portable_lib
    except ImportError:
        raise SystemExit("--against executorch needs ExecuTorch installed (pip install 'pterun[test]')") from None
    try:
        import executorch.kernels.quantized  # noqa: F401 - registers the quantized kernels
    except ImportError:
        pass
    module = portable_lib._load_for_executorch(str(path), str(data[0]) if data else None)
    host_args = [a.cpu() if isinstance(a, torch.Tensor) else a for a in args]
    return Way("executorch", lambda: module.run_method(method, host_args, clone_outputs=False))


def _eager(spec: str | None, args: list, device: str) -> Way:
    if not spec or ":" not in spec:
        raise SystemExit("--against eager needs --model package.module:function returning the nn.Module")
    module_name, _, attr = spec.partition(":")
    model = getattr(importlib.import_module(module_name), attr)().eval().to(device)

    def call():
        with torch.inference_mode():
            return model(*args)

    return Way("eager", call, device.startswith("cuda"))


def other_ways(names: list[str], path: Path, data: list[Path], method: str, args: list, device: str,
               model: str | None) -> list[Way]:
    ways = []
    for name in names:
        if name == "executorch":
            ways.append(_executorch(path, data, method, args))
        elif name == "eager":
            ways.append(_eager(model, args, device))
        else:
            raise SystemExit(f"unknown way {name!r}; expected executorch or eager")
    return ways
