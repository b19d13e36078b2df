"""Inputs for a method: read from a .pt or .npz file, or drawn at random from its metadata."""

from __future__ import annotations

import pickle
import zipfile
from pathlib import Path

import numpy as np
import torch

from pterun import MethodMeta
from pterun.cli.report import UserError, esc, first_line
from pterun.core.dtype import to_torch
from pterun.llm import methods
from pterun.llm.probe import example_inputs, language_model_kind

# Integer inputs are usually indices (token ids, positions); small values are valid for most programs.
INT_HIGH = 16

# What a method takes.
_VALUES = (torch.Tensor, bool, int, float, type(None))


def random_inputs(meta: MethodMeta, device: str = "cpu", seed: int = 0) -> list:
    generator = torch.Generator().manual_seed(seed)
    inputs = []
    for i in range(meta.num_inputs()):
        tag = meta.input_tag(i)
        if tag != "Tensor":
            raise UserError(f"input {i} of method {meta.name()!r} is a {tag}; give the inputs with --inputs")
        info = meta.input_tensor_meta(i)
        dtype = to_torch(info.dtype())
        sizes = info.sizes()
        if dtype.is_floating_point:
            tensor = torch.randn(sizes, generator=generator).to(dtype)
        elif dtype == torch.bool:
            tensor = torch.randint(0, 2, sizes, generator=generator).bool()
        else:
            tensor = torch.randint(0, INT_HIGH, sizes, generator=generator).to(dtype)
        if info.dim_order() == (0, 2, 3, 1):
            tensor = tensor.contiguous(memory_format=torch.channels_last)
        inputs.append(tensor.to(device))
    return inputs


def default_method(program) -> str:
    """--method when it is not given: forward, or a multimodal language model's text_decoder (it has no forward)."""
    names = program.method_names
    if methods.FORWARD not in names and language_model_kind(names) == "multimodal":
        return methods.TEXT_DECODER
    return methods.FORWARD


def drawn_inputs(program, method: str, meta: MethodMeta, device: str, seed: int) -> tuple[list, str]:
    """Inputs for a run without --inputs, and what they are: valid ones for a language model's decoder (random
    tokens at random positions are not: pterun.llm.probe), else random from the metadata."""
    valid = example_inputs(program, method, device=device, seed=seed)
    if valid is not None:
        first = valid[0]
        what = "tokens" if not first.is_floating_point() else "embeddings"
        return valid, f"{first.shape[1]} random {what} from position 0, seed {seed}: valid for a language model"
    return random_inputs(meta, device, seed), f"random from the metadata, seed {seed}"


def language_model_note(program, path: Path) -> str | None:
    """One line saying a program is a language model, with the `pterun generate` command for it."""
    kind = language_model_kind(program.method_names)
    if kind is None:
        return None
    media = []
    if kind == "multimodal":
        names = program.method_names
        media = [option for option, name in (("--image IMAGE", methods.VISION_ENCODER),
                                             ("--audio AUDIO", methods.AUDIO_ENCODER)) if name in names]
    command = " ".join(["pterun generate", esc(path), "--tokenizer TOKENIZER", *media, '--prompt "..."'])
    what = "a multimodal language model" if kind == "multimodal" else "a language model"
    return f"note: {esc(path.name)} is {what} (get_max_seq_len); to generate text: {command}"


def describe(values: list) -> str:
    """What a method is fed, value by value: a tensor's dtype and shape, else the value."""
    def one(v) -> str:
        if isinstance(v, torch.Tensor):
            return f"{str(v.dtype).removeprefix('torch.')} {list(v.shape)}"
        return f"{type(v).__name__} {v!r}"

    return ", ".join(f"#{i} {one(v)}" for i, v in enumerate(values)) or "none"


def load_inputs(path: Path, device: str = "cpu") -> list:
    """The inputs in ``path``: a .npz archive (its arrays in order) or a .pt file holding a tensor, or a
    list, tuple or dict of tensors and scalars."""
    where = f"--inputs {str(path)!r}"
    if not path.exists():
        raise UserError(f"{where}: no such file")
    if path.is_dir():
        raise UserError(f"{where}: is a directory, not a .pt or .npz file")
    with open(path, "rb") as f:
        head = f.read(8)
    if head[4:8] in (b"ET12", b"FT01"):
        kind = "an ExecuTorch program" if head[4:8] == b"ET12" else "an ExecuTorch data file"
        raise UserError(f"{where}: is {kind}, not inputs; inputs are a .pt or .npz file")
    if path.suffix == ".npz":
        values = _read_npz(path, where)
    else:
        values = _read_pt(path, where)
    return [v.to(device) if isinstance(v, torch.Tensor) else v for v in values]


def _read_npz(path: Path, where: str) -> list:
    # np.load takes any file that is not a zip archive for a pickle, and says "pickled data".
    if not zipfile.is_zipfile(path):
        raise UserError(f"{where}: is not an .npz archive (a zip of .npy arrays, as numpy.savez writes)")
    try:
        with np.load(path) as archive:
            return [torch.from_numpy(archive[key]) for key in archive.files]
    except (ValueError, OSError, TypeError, zipfile.BadZipFile, EOFError) as exc:
        raise UserError(f"{where}: cannot read its arrays ({first_line(exc)})") from None


def _read_pt(path: Path, where: str) -> list:
    try:
        loaded = torch.load(path, weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, ValueError, EOFError, OSError, AttributeError, TypeError) as exc:
        raise UserError(f"{where}: is not a file torch.save wrote tensors to ({first_line(exc)})") from None
    values = list(loaded.values()) if isinstance(loaded, dict) else loaded
    if isinstance(values, torch.Tensor):
        return [values]
    if isinstance(values, (list, tuple)):
        odd = [type(v).__name__ for v in values if not isinstance(v, _VALUES)]
        if not odd:
            return list(values)
        found = f"a {type(loaded).__name__} holding a {odd[0]}"
    else:
        found = f"a {type(loaded).__name__}"
    raise UserError(f"{where}: holds {found}; expected a tensor, or a list, tuple or dict of tensors and numbers")
