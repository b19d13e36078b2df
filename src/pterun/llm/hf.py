"""``generate_hf`` and ``generate_text_hf``: a transformers processor's output (a ``BatchFeature``, or any mapping
with its keys) as MultimodalInputs, as ExecuTorch's ``executorch.extension.llm.runner`` converts it.

``input_ids`` [L] or [1, L] becomes token inputs; each run of the image token in it is replaced by one image of
``pixel_values`` ((C, H, W), or (N, C, H, W): the N images in order, one a run), and each run of the audio
token by audio features of ``input_features`` ((chunks, n_bins, n_frames): all of them for one run, or one chunk
a run where there are as many runs as chunks).

Beyond ExecuTorch's, which takes one image and one run of image tokens: several images, audio features, and the
token ids default to the program's ``vision_token_id`` / ``audio_token_id`` methods (optimum-executorch writes
them) where ``image_token_id`` is not given; a run whose length differs from the positions the encoder fills
(where the encoder's output has a fixed size) is refused, since the text after it would sit at other positions
than the processor laid out. ``image_token_index``, the older key, is read as ``image_token_id`` in the inputs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from pterun.errors import InvalidArgument
from pterun.llm import methods
from pterun.llm.config import GenerationConfig
from pterun.llm.metadata import constant_int
from pterun.llm.multimodal_input import MultimodalInput, make_audio_input, make_image_input, make_token_input

_TOKEN_METHODS = {"image": "vision_token_id", "audio": "audio_token_id"}
_MEDIA_KEYS = {"image": "pixel_values", "audio": "input_features"}


def token_runs(ids: list[int], token_id: int | None) -> list[tuple[int, int]]:
    """The runs of ``token_id`` in ``ids``: (first, end) pairs, end exclusive."""
    runs: list[tuple[int, int]] = []
    if token_id is None:
        return runs
    i = 0
    while i < len(ids):
        if ids[i] == token_id:
            j = i
            while j < len(ids) and ids[j] == token_id:
                j += 1
            runs.append((i, j))
            i = j
        else:
            i += 1
    return runs


def _ids(inputs: Mapping) -> list[int]:
    if "input_ids" not in inputs:
        raise InvalidArgument("HF inputs must contain 'input_ids' (torch.Tensor)")
    ids = inputs["input_ids"]
    if not isinstance(ids, torch.Tensor):
        raise InvalidArgument(f"'input_ids' must be a torch.Tensor, got {type(ids).__name__} (run the processor "
                              f"with return_tensors='pt')")
    if ids.dim() == 2:
        if ids.shape[0] != 1:
            raise InvalidArgument(f"Expected 'input_ids' with batch size 1 when 2D (shape (1, L)), found "
                                  f"{list(ids.shape)}")
        ids = ids[0]
    if ids.dim() != 1:
        raise InvalidArgument(f"'input_ids' must be 1D (L) or 2D with batch size 1, found {list(ids.shape)}")
    return ids.to(torch.long).tolist()


def _program_token(runner, kind: str) -> int | None:
    return None if runner is None else constant_int(runner.program, _TOKEN_METHODS[kind])


def _media(inputs: Mapping, kind: str, runs: int) -> list[torch.Tensor]:
    """``inputs``' images or audio, one tensor a run."""
    key = _MEDIA_KEYS[kind]
    value = inputs[key]
    if not isinstance(value, torch.Tensor):
        raise InvalidArgument(f"'{key}' must be a torch.Tensor, run the processor with return_tensors='pt'")
    if kind == "image":
        if value.dim() == 3:
            value = value.unsqueeze(0)
        if value.dim() != 4:
            raise InvalidArgument(f"'pixel_values' must be 3D (C, H, W) or 4D (N, C, H, W), got {list(value.shape)}")
        if value.shape[0] != runs:
            raise InvalidArgument(f"Mismatch between images and image token runs: images={value.shape[0]}, "
                                  f"runs={runs} (each run of image tokens takes one image)")
        return [value[i] for i in range(runs)]
    if value.dim() != 3:
        raise InvalidArgument(f"'input_features' must be 3D (chunks, n_bins, n_frames), got {list(value.shape)}")
    if runs == 1:
        return [value]
    if value.shape[0] != runs:
        raise InvalidArgument(f"Mismatch between audio chunks and audio token runs: chunks={value.shape[0]}, "
                              f"runs={runs} (one run takes every chunk; several take one chunk each)")
    return [value[i:i + 1] for i in range(runs)]


def _fixed_positions(runner, kind: str) -> int | None:
    """The positions one image fills, where the encoder's output says so (a fixed size; audio fills as many as
    it has chunks)."""
    name = methods.ENCODERS[kind]
    if runner is None or name not in runner.program.method_names:
        return None
    out = runner.program.metadata(name).output_tensor_meta(0)
    return out.sizes()[1] if out.dynamism() == "static" and kind == "image" else None


def hf_to_multimodal_inputs(inputs: Mapping, image_token_id: int | None = None, *, runner=None,
                            audio_token_id: int | None = None) -> list[MultimodalInput]:
    """``inputs`` (a processor's output) as MultimodalInputs in order; ``runner`` supplies the program's token ids
    and the positions its encoders fill."""
    if not isinstance(inputs, Mapping):
        raise InvalidArgument(f"inputs must be a BatchFeature (from a transformers processor) or a list of "
                              f"MultimodalInput, got {type(inputs).__name__}")
    ids = _ids(inputs)
    if image_token_id is None:
        image_token_id = inputs.get("image_token_id", inputs.get("image_token_index"))
    tokens = {"image": image_token_id, "audio": audio_token_id}
    pieces: list[tuple[int, int, MultimodalInput]] = []  # (first, end, input), in order of first
    for kind, key in _MEDIA_KEYS.items():
        if tokens[kind] is None:
            tokens[kind] = _program_token(runner, kind)
        if key not in inputs:
            if tokens[kind] is not None and tokens[kind] in ids:
                raise InvalidArgument(f"Found {kind} token(s) {tokens[kind]} in input_ids but '{key}' not provided")
            continue
        if tokens[kind] is None:
            raise InvalidArgument(f"'{key}' provided but missing '{kind}_token_id' (the program has no "
                                  f"{_TOKEN_METHODS[kind]} method either)")
        runs = token_runs(ids, tokens[kind])
        if not runs:
            raise InvalidArgument(f"'{key}' provided but no occurrence of {kind}_token_id {tokens[kind]} in "
                                  f"input_ids")
        fixed = _fixed_positions(runner, kind)
        make = make_image_input if kind == "image" else make_audio_input
        for (first, end), media in zip(runs, _media(inputs, kind, len(runs))):
            if fixed is not None and end - first != fixed:
                raise InvalidArgument(f"a run of {end - first} {kind} tokens at {first} in input_ids, where the "
                                      f"encoder fills {fixed} positions")
            pieces.append((first, end, make(media)))
    pieces.sort(key=lambda piece: piece[0])
    converted: list[MultimodalInput] = []
    cursor = 0
    for first, end, media in pieces:
        if first > cursor:
            converted.append(make_token_input(ids[cursor:first]))
        converted.append(media)
        cursor = end
    if cursor < len(ids):
        converted.append(make_token_input(ids[cursor:]))
    return converted


def _converted(runner, inputs: Any, image_token_id: int | None) -> list[MultimodalInput]:
    if isinstance(inputs, Sequence) and not isinstance(inputs, str) and \
            all(isinstance(item, MultimodalInput) for item in inputs):
        return list(inputs)
    return hf_to_multimodal_inputs(inputs, image_token_id, runner=runner)


def generate_hf(runner, inputs: Any, config: GenerationConfig | None = None, image_token_id: int | None = None,
                token_callback=None, stats_callback=None) -> None:
    """``runner.generate`` of a processor's output (or of a list of MultimodalInput)."""
    runner.generate(_converted(runner, inputs, image_token_id), config, token_callback, stats_callback)


def generate_text_hf(runner, inputs: Any, config: GenerationConfig | None = None,
                     image_token_id: int | None = None) -> str:
    """``runner.generate_text`` of a processor's output (or of a list of MultimodalInput)."""
    return runner.generate_text(_converted(runner, inputs, image_token_id), config)
