"""Which programs the LLM runners read, and inputs that are valid for their methods.

A program is a language model when it has ``get_max_seq_len`` (the one metadata method ExecuTorch's runners
require): a multimodal one where it has ``token_embedding`` and ``text_decoder`` (MultimodalRunner's methods),
a text one where it has ``forward`` or ``prefill`` (TextLLMRunner's). Random inputs are not valid for their
decoders: a token id must be in the vocabulary, and the positions must start where the cache has room for
every token of the call. ``example_inputs`` makes inputs that are: the longest run of tokens a call takes
within the context, from position 0.
"""

from __future__ import annotations

import torch

from pterun.core.dtype import to_torch
from pterun.llm import methods
from pterun.llm.decoder import INTEGER_DTYPES
from pterun.llm.metadata import MAX_CONTEXT_LEN, MAX_SEQ_LEN, VOCAB_SIZE, constant_int


def language_model_kind(method_names) -> str | None:
    """"multimodal", "text", or None for a program neither runner reads."""
    names = set(method_names)
    if MAX_SEQ_LEN not in names:
        return None
    if methods.TOKEN_EMBEDDING in names and methods.TEXT_DECODER in names:
        return "multimodal"
    if methods.FORWARD in names or methods.PREFILL in names:
        return "text"
    return None


def example_inputs(program, method_name: str, *, device: str | torch.device = "cpu",
                   seed: int = 0) -> list[torch.Tensor] | None:
    """Valid inputs for ``method_name`` of a language model: its tokens (ids below the vocabulary, at most the
    context's worth) or embeddings, then its positions from 0; None where the method is none of a decoder,
    ``token_embedding`` or ``text_decoder`` (an encoder's random inputs are valid as they are)."""
    if language_model_kind(program.method_names) is None or method_name not in program.method_names:
        return None
    meta = program.metadata(method_name)
    if meta.num_inputs() not in (1, 2) or any(meta.input_tag(i) != "Tensor" for i in range(meta.num_inputs())):
        return None
    first = meta.input_tensor_meta(0)
    sizes, dtype = tuple(first.sizes()), to_torch(first.dtype())
    tokens = dtype in INTEGER_DTYPES and len(sizes) == 2 and sizes[0] == 1
    embeddings = dtype.is_floating_point and len(sizes) == 3 and sizes[0] == 1
    if not (tokens or embeddings) or (tokens and method_name in methods.ENCODERS.values()):
        return None
    if meta.num_inputs() == 2:
        position = meta.input_tensor_meta(1)
        if len(position.sizes()) != 1 or to_torch(position.dtype()) not in INTEGER_DTYPES:
            return None
    max_seq_len = constant_int(program, MAX_SEQ_LEN, 128)
    context = constant_int(program, MAX_CONTEXT_LEN, max_seq_len)
    # A call fills at most the context less one position (the runners keep one for the next token), and at
    # most the input's bound.
    count = max(1, min(sizes[1], context - 1))
    generator = torch.Generator().manual_seed(seed)
    if tokens:
        vocab = constant_int(program, VOCAB_SIZE, 0) or 16
        first_input = torch.randint(0, vocab, (1, count), generator=generator, dtype=torch.int64).to(dtype)
    else:
        first_input = torch.randn(1, count, sizes[2], generator=generator).to(dtype)
    inputs = [first_input]
    if meta.num_inputs() == 2:
        info = meta.input_tensor_meta(1)
        position_dtype = to_torch(info.dtype())
        # Cache positions (one per token) where the input takes more than one, else the start position.
        inputs.append(torch.arange(count, dtype=position_dtype) if info.sizes()[0] > 1
                      else torch.zeros(1, dtype=position_dtype))
    return [value.to(device) for value in inputs]
