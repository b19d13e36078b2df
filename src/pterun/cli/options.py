"""What the commands share about their options: each shared option declared once, the bundled example
program, and a checked --device.

A command declares a shared option by its type (``data: DataFiles = None``), so the flag, its short form
and its help read the same in every command.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Annotated, Optional

import torch
import typer

from pterun.cli.report import UserError
from pterun.core.device import Device
from pterun.enums import DEVICE_TYPE_LABELS

# The program a command reads; left out, the bundled example (example_program()).
ProgramPath = Annotated[
    Optional[Path], typer.Argument(help="The .pte file; the bundled example when left out.")
]
# The .ptd files a program's external tensors live in.
DataFiles = Annotated[
    Optional[list[Path]], typer.Option("--data", "-d", help=".ptd file(s) with external tensors.")
]
# Every command that runs a program takes --device with no default: left out, load_program gets no device
# (memory where the program's plan puts it) and inputs are made on the default device, the CPU
# (input_device()); --device cpu puts everything on the CPU whatever the plan says.
DeviceName = Annotated[
    Optional[str], typer.Option(
        "--device", help="Run every kernel on this device: cpu, cuda or cuda:N (default: where the program's plan "
                         "puts its memory, inputs on the CPU).")
]
# What load_program's trust_native_code=True is, for a command that loads methods.
InputsFile = Annotated[Optional[Path], typer.Option(
    "--inputs", "-i", help=".pt or .npz file of inputs; else random ones drawn from the method's metadata.",
)]

AllowTf32 = Annotated[bool, typer.Option(
    "--allow-tf32", help="Let float32 products and convolutions on CUDA use TF32 (docs/precision.md).",
)]

TrustNativeCode = Annotated[bool, typer.Option(
    "--trust-native-code",
    help="Let delegates that are native code (ExecuTorch's CudaBackend: compiled libraries in the program) "
         "load and run with this process's rights; without it such a program is refused (docs/trust.md).",
)]

EXAMPLE = "llama_tiny.pte"
# The bundled example LLM (ExecuTorch's LLM export: a KV cache and the metadata methods) and its tokenizer.
LLM_EXAMPLE = ("llm_tiny.pte", "llm_tiny.tokenizer.json")


def example_program() -> Path:
    return Path(str(resources.files("pterun.examples") / EXAMPLE))


def example_llm() -> tuple[Path, Path]:
    root = resources.files("pterun.examples")
    program, tokenizer = (Path(str(root / name)) for name in LLM_EXAMPLE)
    if not program.exists():
        raise UserError(f"the bundled example LLM {program.name} is missing from this installation")
    return program, tokenizer


def device_option(device: str | None) -> str | None:
    """The --device option, checked: a device torch knows, and one this machine has."""
    if device is None:
        return None
    try:
        parsed = torch.device(device)
    except RuntimeError:
        raise UserError(f"--device {device!r}: not a device; expected cpu, cuda or cuda:N") from None
    if parsed.type not in DEVICE_TYPE_LABELS:
        raise UserError(f"--device {device!r}: pterun runs programs on cpu or cuda")
    if parsed.type == "cuda":
        if not torch.cuda.is_available():
            raise UserError(f"--device {device!r}: no CUDA device is available on this machine")
        if parsed.index is not None and parsed.index >= torch.cuda.device_count():
            raise UserError(f"--device {device!r}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return device


def input_device(device: str | None) -> str:
    """Where a command makes its inputs: --device's, else the default device (the CPU)."""
    return device if device is not None else str(Device.parse(None))
