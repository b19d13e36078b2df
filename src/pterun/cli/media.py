"""Images and audio from files for `pterun generate`: images read with Pillow, WAV files as pterun.asr reads
them, then shaped for the program's encoders.

An image is resized to the ``vision_encoder``'s height and width (bicubic, as CLIP's and SigLIP's processors
resize), or within its bounds keeping its aspect where they are dynamic (ExecuTorch's LLaVA runner: the longest
edge to the bound); a uint8 encoder gets the pixels, a float one the pixels scaled by the program's
``rescale_factor`` (1/255 where it has none) and normalized by its ``image_mean`` and ``image_std`` where it has
them (optimum-executorch writes the processor's settings as methods). For a model's exact preprocessing, run its
transformers processor and ``generate_hf`` from Python.

Audio: a .wav file read as pterun.asr reads one (SciPy: integer PCM by its full scale, float, channels averaged,
resampled to 16 kHz; ExecuTorch's WAV loader divides 16-bit samples by 32767 and reads no other rate), turned
into the encoder's features by an audio processor program (``--audio-processor``: ExecuTorch's
WhisperAudioProcessor export, as its Voxtral example uses), or features saved as a tensor (.pt, .npy, .npz)
used as they are.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from pterun.cli.inputs import load_inputs
from pterun.cli.report import UserError, first_line
from pterun.core.dtype import to_torch
from pterun.errors import PteError
from pterun.llm.metadata import constant_floats


def read_image(path: Path, program, encoder: str) -> torch.Tensor:
    """``path``'s pixels as (C, H, W), sized and typed for ``program``'s ``encoder``."""
    try:
        from PIL import Image as PILImage
    except ImportError:
        raise UserError("--image needs Pillow (pip install 'pterun[llm]')") from None
    where = f"--image {str(path)!r}"
    try:
        with PILImage.open(path) as opened:
            image = opened.convert("RGB")
    except FileNotFoundError:
        raise UserError(f"{where}: no such file") from None
    except (OSError, ValueError, PILImage.DecompressionBombError) as exc:
        raise UserError(f"{where}: not an image Pillow reads ({first_line(exc)})") from None
    info = program.metadata(encoder).input_tensor_meta(0)
    sizes = info.sizes()
    height, width = sizes[-2], sizes[-1]
    if info.dynamism() != "static":  # within the bounds, keeping the aspect
        ratio = min(height / image.height, width / image.width)
        height, width = max(1, int(image.height * ratio)), max(1, int(image.width * ratio))
    if (image.width, image.height) != (width, height):
        image = image.resize((width, height), PILImage.Resampling.BICUBIC)
    pixels = torch.from_numpy(np.array(image)).permute(2, 0, 1)
    if to_torch(info.dtype()) == torch.uint8:
        return pixels.contiguous()
    scale = constant_floats(program, "rescale_factor")
    values = pixels.to(torch.float32) * (1 / 255 if scale is None else scale[0])
    mean, std = constant_floats(program, "image_mean"), constant_floats(program, "image_std")
    if mean is not None and std is not None:
        values = (values - torch.tensor(mean).reshape(-1, 1, 1)) / torch.tensor(std).reshape(-1, 1, 1)
    return values.to(torch.float32).contiguous()


def read_wav(path: Path) -> torch.Tensor:
    """``path``'s samples, mono float32 in [-1, 1] at 16 kHz, read (and resampled) as pterun.asr reads them."""
    from pterun.asr import SAMPLE_RATE, load_wav

    try:
        return torch.from_numpy(load_wav(path, SAMPLE_RATE))
    except PteError as error:
        raise UserError(f"--audio {str(path)!r}: {error.message}") from None


def read_audio(path: Path, processor) -> torch.Tensor:
    """The audio encoder's features for ``path``: a .wav through ``processor`` (a loaded program, or None), or a
    tensor file of features."""
    if path.suffix.lower() != ".wav":
        values = load_inputs(path)
        if not values or not isinstance(values[0], torch.Tensor):
            raise UserError(f"--audio {str(path)!r}: expected a .wav file or a tensor of features")
        return values[0]
    if processor is None:
        raise UserError(f"--audio {str(path)!r}: a .wav needs --audio-processor, the program that turns samples into "
                        f"the encoder's features (ExecuTorch's extension/audio/mel_spectrogram.py exports one)")
    return processor.load_method("forward").execute([read_wav(path)])[0]
