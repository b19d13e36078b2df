"""A multimodal program's encoders (``vision_encoder``, ``audio_encoder``): an image or audio in, the embeddings
of the positions it fills out, converted as ExecuTorch's MultimodalPrefiller converts them.

The encoder's first input decides: an image goes in as (C, H, W), or (1, C, H, W) where the input has four
dimensions; float32 and uint8 images go to encoders of their own type only, and float32 ones to bfloat16 encoders
converted; audio features (batch, n_bins, n_frames) go in as they are, float32 ones converted for a bfloat16
encoder. The output is [1, n, dim]: n positions of the text decoder's embeddings, checked at load.
"""

from __future__ import annotations

import torch

from pterun.core.dtype import to_torch
from pterun.errors import InvalidArgument, InvalidProgram, InvalidState, NotSupported
from pterun.llm.multimodal_input import Audio, Image


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


class Encoder:
    def __init__(self, program, method_name: str, kind: str, device: torch.device, dim: int,
                 dtype: torch.dtype) -> None:
        self.method = program.load_method(method_name)
        self.name = method_name
        self.kind = kind  # "image" or "audio"
        self.device = device
        meta = self.method.method_meta()
        if meta.num_inputs() < 1 or meta.input_tag(0) != "Tensor":
            raise InvalidProgram(f"method {method_name!r}: an encoder takes the {kind} as its first input, a tensor; "
                                 f"found {meta.num_inputs()} inputs")
        if meta.num_inputs() > 1:
            raise NotSupported(f"method {method_name!r} takes {meta.num_inputs()} inputs; ExecuTorch's "
                               f"MultimodalRunner passes only the {kind}")
        info = meta.input_tensor_meta(0)
        self.sizes = tuple(info.sizes())
        self.static = info.dynamism() == "static"
        self.dtype = to_torch(info.dtype())
        allowed = (torch.float32, torch.uint8, torch.bfloat16) if kind == "image" else None
        if allowed is not None and self.dtype not in allowed:
            raise NotSupported(f"Unsupported image encoder input dtype: {_name(self.dtype)} (method {method_name!r} "
                               f"takes {list(self.sizes)}); expected float32, uint8 or bfloat16")
        out = meta.output_tensor_meta(0) if meta.num_outputs() >= 1 and meta.output_tag(0) == "Tensor" else None
        if out is None or len(out.sizes()) != 3 or out.sizes()[0] != 1 or out.sizes()[2] != dim \
                or to_torch(out.dtype()) != dtype:
            found = "no tensor" if out is None else f"{list(out.sizes())} of {to_torch(out.dtype())}"
            raise InvalidProgram(f"method {method_name!r}: expected embeddings [1, n, {dim}] of {dtype} out (what "
                                 f"text_decoder takes), found {found}")

    def convert(self, value: Image | Audio) -> torch.Tensor:
        """The tensor the encoder is given for ``value``, checked against its input."""
        tensor = value.tensor
        if self.kind == "image":
            wanted = torch.float32 if self.dtype == torch.bfloat16 else self.dtype
            if tensor.dtype != wanted:
                has = "uint8_t" if tensor.dtype == torch.uint8 else "float"
                expects = "uint8_t" if self.dtype == torch.uint8 else (
                    "float" if self.dtype == torch.float32 else "BFloat16 (from float32)")
                raise InvalidArgument(f"Model expects {expects} image data, but image has {has} data "
                                      f"({self.name} takes {list(self.sizes)} of {_name(self.dtype)})")
            if len(self.sizes) == 4:
                tensor = tensor.unsqueeze(0)
        elif tensor.dtype != self.dtype and not (self.dtype == torch.bfloat16 and tensor.dtype == torch.float32):
            raise NotSupported(f"Unsupported audio encoder input dtype: {_name(tensor.dtype)}. Expecting "
                               f"{_name(self.dtype)} ({self.name} takes {list(self.sizes)})")
        if tensor.dim() != len(self.sizes) or (self.static and tuple(tensor.shape) != self.sizes):
            raise InvalidArgument(f"{self.name} takes {'' if self.static else 'at most '}{list(self.sizes)} of "
                                  f"{_name(self.dtype)}; the {self.kind} is {list(tensor.shape)}")
        return tensor.to(self.device, self.dtype)

    def encode(self, value: Image | Audio) -> torch.Tensor:
        """The embeddings ``value`` fills the context with: [1, n, dim], a tensor of the caller's."""
        embeddings = self.method.execute([self.convert(value)])[0]
        if embeddings.shape[1] == 0:
            raise InvalidState(f"The encoder returned an empty output ({self.name})")
        return embeddings
