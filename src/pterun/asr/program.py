"""An encoder-decoder speech program as ExecuTorch's Seq2SeqRunner and optimum-executorch's ASR export make it.

Methods:

- ``encoder``: log-mel features ``[1, n_mels, n_frames]`` (float32, or the model's dtype) -> the encoder's
  states ``[1, positions, width]``;
- ``text_decoder`` (``decoder`` in optimum-executorch's first releases): one token ``[1, 1]``, the encoder's
  states and the token's position ``[1]`` -> logits ``[1, 1, vocab]``, its self-attention cache kept in the
  program between calls;
- constant methods: ``get_max_seq_len`` (the cache's length), ``get_eos_ids`` (ExecuTorch's) or
  ``get_eos_id`` (optimum-executorch's), ``decoder_start_token_id``, ``get_vocab_size``, all optional.

optimum-executorch also exports ``sampler`` (the argmax of the logits), which ExecuTorch's runner calls at
temperature 0 to keep the logits on the device; pterun's argmax runs where the logits are, so it is not used.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from pterun.core.dtype import to_torch
from pterun.errors import InvalidProgram

ENCODER = "encoder"
DECODERS = ("text_decoder", "decoder")
MAX_SEQ_LEN = "get_max_seq_len"
EOS_IDS = ("get_eos_ids", "get_eos_id")
DECODER_START = "decoder_start_token_id"
VOCAB_SIZE = "get_vocab_size"
_INTEGER = (torch.int64, torch.int32)


@dataclass(frozen=True)
class Seq2SeqMetadata:
    max_seq_len: int | None  # positions in the decoder's cache, where the program says
    eos_ids: tuple[int, ...] | None
    decoder_start_token_id: int | None
    vocab_size: int | None


def find_methods(program) -> tuple[str, str]:
    """The encoder's and the decoder's method names, or InvalidProgram saying what the program has."""
    names = program.method_names
    decoder = next((name for name in DECODERS if name in names), None)
    if ENCODER not in names or decoder is None:
        raise InvalidProgram(
            f"not an encoder-decoder program: expected methods {ENCODER!r} and {DECODERS[0]!r} (as ExecuTorch's "
            f"Seq2SeqRunner and optimum-executorch's speech export have), found {sorted(names)}"
        )
    return ENCODER, decoder


def read_metadata(program) -> Seq2SeqMetadata:
    names = program.method_names

    def values(name: str) -> list[int] | None:
        if name not in names:
            return None
        found = program.load_method(name, cached=False).execute([])
        ints: list[int] = []
        for value in found:
            if isinstance(value, torch.Tensor) and not (value.dtype.is_floating_point or value.is_complex()):
                ints.extend(int(i) for i in value.reshape(-1).tolist())
            elif isinstance(value, int):
                ints.append(int(value))
            else:
                kind = f"a tensor of {value.dtype}" if isinstance(value, torch.Tensor) else type(value).__name__
                raise InvalidProgram(f"metadata method {name!r}: expected integers, found {kind}")
        return ints

    def scalar(name: str) -> int | None:
        found = values(name)
        if found is not None and len(found) != 1:
            raise InvalidProgram(f"metadata method {name!r}: expected one value, found {len(found)}")
        return found[0] if found else None

    eos = next((tuple(found) for name in EOS_IDS if (found := values(name)) is not None), None)
    return Seq2SeqMetadata(max_seq_len=scalar(MAX_SEQ_LEN), eos_ids=eos,
                           decoder_start_token_id=scalar(DECODER_START), vocab_size=scalar(VOCAB_SIZE))


@dataclass(frozen=True)
class Signature:
    """What the two methods take and give, checked against each other once at load."""

    n_mels: int
    n_frames: int
    feature_dtype: torch.dtype
    token_dtype: torch.dtype
    position_dtype: torch.dtype
    vocab: int  # the logits' width


def check_signature(encoder, decoder) -> Signature:
    enc, dec = encoder.method_meta(), decoder.method_meta()
    where = f"method {enc.name()!r}"
    if enc.num_inputs() != 1 or enc.num_outputs() != 1:
        raise InvalidProgram(f"{where}: expected one input (the log-mel features) and one output, found "
                             f"{enc.num_inputs()} and {enc.num_outputs()}")
    features, states = enc.input_tensor_meta(0), enc.output_tensor_meta(0)
    feature_dtype = to_torch(features.dtype())
    if len(features.sizes()) != 3 or features.sizes()[0] != 1 or not feature_dtype.is_floating_point:
        raise InvalidProgram(f"{where}: expected features [1, n_mels, n_frames] of floats, found "
                             f"{list(features.sizes())} of {feature_dtype}")
    if len(states.sizes()) != 3:
        raise InvalidProgram(f"{where}: expected states [1, positions, width], found {list(states.sizes())}")
    where = f"method {dec.name()!r}"
    if dec.num_inputs() != 3 or dec.num_outputs() != 1:
        raise InvalidProgram(f"{where}: expected three inputs (token, encoder states, position) and one output "
                             f"(logits), found {dec.num_inputs()} and {dec.num_outputs()}")
    token, hidden, position = (dec.input_tensor_meta(i) for i in range(3))
    token_dtype, position_dtype = to_torch(token.dtype()), to_torch(position.dtype())
    if list(token.sizes()) != [1, 1] or token_dtype not in _INTEGER:
        raise InvalidProgram(f"{where}: expected the token [1, 1] of int64, found {list(token.sizes())} of "
                             f"{token_dtype}")
    if list(position.sizes()) != [1] or position_dtype not in _INTEGER:
        raise InvalidProgram(f"{where}: expected the position [1] of int64, found {list(position.sizes())} of "
                             f"{position_dtype}")
    width, states_dtype = states.sizes(), to_torch(states.dtype())
    if len(hidden.sizes()) != 3 or hidden.sizes()[2] != width[2] or hidden.sizes()[1] < width[1] \
            or to_torch(hidden.dtype()) != states_dtype:
        raise InvalidProgram(f"{where}: expected the encoder's states {list(width)} of {states_dtype}, found "
                             f"{list(hidden.sizes())} of {to_torch(hidden.dtype())}")
    logits = dec.output_tensor_meta(0).sizes()
    if len(logits) < 2 or logits[-1] < 1:
        raise InvalidProgram(f"{where}: expected logits [1, 1, vocab], found {list(logits)}")
    return Signature(n_mels=features.sizes()[1], n_frames=features.sizes()[2], feature_dtype=feature_dtype,
                     token_dtype=token_dtype, position_dtype=position_dtype, vocab=logits[-1])
