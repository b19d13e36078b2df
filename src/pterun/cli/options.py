"""What the commands share about their options: the bundled example program, and a checked --device."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import torch
import typer

from pterun.cli.report import UserError
from pterun.enums import DEVICE_TYPE_LABELS

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


def trust_native_code_option():
    """--trust-native-code: what load_program's trust_native_code=True is, for a command that loads methods."""
    return typer.Option(
        False, "--trust-native-code",
        help="Let delegates that are native code (ExecuTorch's CudaBackend: compiled libraries in the program) "
             "load and run with this process's rights; without it such a program is refused (docs/trust.md).",
    )
