"""The ways `pterun bench` can run a program: pterun itself, ExecuTorch's runtime, eager PyTorch."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import torch

from pterun.cli.report import UserError, first_line
from pterun.cli.timing import Way


def pterun_ways(method, args: list, device: str) -> list[Way]:
    cuda = device.startswith("cuda")

    def call():
        return method.execute(args, clone_outputs=False)

    return [Way("pterun", call, cuda)]


def executorch_module(path: Path, data: list[Path], method: str, args: list):
    """ExecuTorch's runtime's module for ``path``, and ``args`` on the host, after one call of ``method``
    that shows it runs (its outputs are the module's third value)."""
    try:
        from executorch.extension.pybindings import portable_lib
    except ImportError:
        raise UserError("--against executorch needs ExecuTorch installed (pip install 'pterun[test]')") from None
    try:
        import executorch.kernels.quantized  # noqa: F401 - registers the quantized kernels
    except ImportError:
        pass
    try:
        # The LLM kernels (llama::custom_sdpa, update_cache, ...) that ExecuTorch's LLM export calls.
        import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401
    except Exception:  # noqa: BLE001 - optional, and its import may fail in ways of its own
        pass
    host_args = [a.cpu() if isinstance(a, torch.Tensor) else a for a in args]
    try:
        module = portable_lib._load_for_executorch(str(path), str(data[0]) if data else None)
        outputs = module.run_method(method, host_args, clone_outputs=True)
    except RuntimeError as exc:
        raise UserError(f"--against executorch: ExecuTorch's runtime cannot run it ({first_line(exc)})") from None
    return module, host_args, list(outputs)


def _executorch(path: Path, data: list[Path], method: str, args: list) -> Way:
    module, host_args, _ = executorch_module(path, data, method, args)  # fails here, not in the middle of timing
    return Way("executorch", lambda: module.run_method(method, host_args, clone_outputs=False))


def _import_model(spec: str):
    """The nn.Module ``spec`` ('package.module:function') makes; modules are found from the current
    directory too, as ``python -m`` finds them."""
    where = f"--model {spec!r}"
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise UserError(f"{where}: expected 'package.module:function' returning the nn.Module")
    added = os.getcwd() not in sys.path
    if added:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UserError(f"{where}: cannot import {module_name!r} ({first_line(exc)})") from None
    except Exception as exc:  # noqa: BLE001 - the user's module failed while importing
        raise UserError(f"{where}: importing {module_name!r} failed ({first_line(exc)})") from None
    finally:
        if added:
            sys.path.remove(os.getcwd())
    factory = getattr(module, attr, None)
    if factory is None or not callable(factory):
        raise UserError(f"{where}: {module_name!r} has no function {attr!r}")
    try:
        model = factory()
    except Exception as exc:  # noqa: BLE001 - the user's factory failed
        raise UserError(f"{where}: calling {attr}() failed ({first_line(exc)})") from None
    if not isinstance(model, torch.nn.Module):
        raise UserError(f"{where}: {attr}() returned a {type(model).__name__}, not a torch.nn.Module")
    return model


def _eager(spec: str | None, args: list, device: str) -> Way:
    if not spec:
        raise UserError("--against eager needs --model package.module:function returning the nn.Module")
    model = _import_model(spec).eval().to(device)

    def call():
        with torch.inference_mode():
            return model(*args)

    try:
        call()  # fails here, not in the middle of timing
    except Exception as exc:  # noqa: BLE001 - the user's model does not take the program's inputs
        raise UserError(
            f"--model {spec!r}: the model does not run on the program's inputs ({first_line(exc)})"
        ) from None
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
            raise UserError(f"--against: unknown way {name!r}; expected executorch or eager")
    return ways
