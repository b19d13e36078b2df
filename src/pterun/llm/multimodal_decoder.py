"""A multimodal program's text side: ``token_embedding`` then ``text_decoder``, as ExecuTorch's
MultimodalDecoderRunner calls them (multimodal_decoder_runner.h, multimodal_prefiller.cpp).

Both are checked at load: tokens ``[1, n]`` in and embeddings ``[1, n, dim]`` out of ``token_embedding``;
embeddings ``[1, n, dim]`` and the position input (``Positions``) into ``text_decoder``, logits out. ExecuTorch
passes each input to ``text_decoder`` in one call; pterun does too where the input fits the method's bound on
``n``, and in chunks of that bound where it does not (ExecuTorch's call fails there).
"""

from __future__ import annotations

import torch

from pterun.core.dtype import to_torch
from pterun.errors import InvalidProgram
from pterun.llm import methods
from pterun.llm.decoder import INTEGER_DTYPES, Positions, last_logits, run_decoder


def _check(condition: bool, method: str, expected: str, found: str) -> None:
    if not condition:
        raise InvalidProgram(f"method {method!r} is not what ExecuTorch's MultimodalRunner reads: expected "
                             f"{expected}, found {found}")


def _described(info) -> str:
    return f"{list(info.sizes())} of {to_torch(info.dtype())}"


class MultimodalDecoder:
    """Embeds tokens and decodes embeddings at positions of the KV cache."""

    use_kv_cache = True

    def __init__(self, program, device: torch.device, stats) -> None:
        self.embedding = program.load_method(methods.TOKEN_EMBEDDING)
        self.text_decoder = program.load_method(methods.TEXT_DECODER)
        self.stats = stats
        self.device = device
        embedding, decoder = self.embedding.method_meta(), self.text_decoder.method_meta()
        _check(embedding.num_inputs() == 1 and embedding.num_outputs() == 1, methods.TOKEN_EMBEDDING,
               "one input (tokens) and one output", f"{embedding.num_inputs()} and {embedding.num_outputs()}")
        tokens, embeds = embedding.input_tensor_meta(0), embedding.output_tensor_meta(0)
        self.token_dtype = to_torch(tokens.dtype())
        _check(len(tokens.sizes()) == 2 and tokens.sizes()[0] == 1 and self.token_dtype in INTEGER_DTYPES,
               methods.TOKEN_EMBEDDING, "tokens [1, n] of int64", _described(tokens))
        _check(len(embeds.sizes()) == 3, methods.TOKEN_EMBEDDING, "embeddings [1, n, dim] out", _described(embeds))
        _check(decoder.num_inputs() == 2 and decoder.num_outputs() == 1, methods.TEXT_DECODER,
               "two inputs (embeddings, positions) and one output (logits)",
               f"{decoder.num_inputs()} and {decoder.num_outputs()}")
        inputs = decoder.input_tensor_meta(0)
        self.dim = inputs.sizes()[-1]
        self.dtype = to_torch(inputs.dtype())
        _check(len(inputs.sizes()) == 3 and inputs.sizes()[0] == 1 and self.dtype.is_floating_point,
               methods.TEXT_DECODER, "embeddings [1, n, dim] of a float type", _described(inputs))
        _check(embeds.sizes()[-1] == self.dim and to_torch(embeds.dtype()) == self.dtype, methods.TOKEN_EMBEDDING,
               f"embeddings of {self.dim} {self.dtype} (what {methods.TEXT_DECODER} takes)", _described(embeds))
        self.positions = Positions(decoder, device)
        # The longest run each method takes in one call (the bound of a dynamic length).
        self.max_tokens = tokens.sizes()[1]
        self.max_embeds = inputs.sizes()[1]
        self._token = torch.zeros((1, 1), dtype=self.token_dtype, device=device)

    def embed(self, tokens: torch.Tensor) -> torch.Tensor:
        """Embeddings of ``tokens`` [1, n] (n within the bound), valid until the next call."""
        return self.embedding.execute([tokens], clone_outputs=False)[0]

    def prefill(self, embeddings: torch.Tensor, start_pos: int) -> torch.Tensor:
        """Feeds ``embeddings`` [1, n, dim] from ``start_pos``; the logits after the last."""
        n = embeddings.shape[1]
        chunk = self.max_embeds
        for begin in range(0, n, chunk):
            part = embeddings[:, begin:begin + chunk]
            logits = run_decoder(self.text_decoder, [part, self.positions.of(start_pos + begin, part.shape[1])],
                                 self.stats)
        return logits

    def prefill_tokens(self, tokens: list[int], start_pos: int) -> torch.Tensor:
        """Embeds and feeds ``tokens`` from ``start_pos``; the logits after the last."""
        chunk = min(self.max_tokens, self.max_embeds)
        for begin in range(0, len(tokens), chunk):
            ids = torch.tensor([tokens[begin:begin + chunk]], dtype=self.token_dtype, device=self.device)
            logits = self.prefill(self.embed(ids), start_pos + begin)
        return logits

    def decode_step(self, token: int, pos: int) -> torch.Tensor:
        """Logits after one token at ``pos``: the per-token call of generation, inputs allocated once."""
        self._token.fill_(token)
        self.stats.on_model_execution_begin()
        outputs = self.text_decoder.execute([self.embed(self._token), self.positions.one(pos)], clone_outputs=False)
        self.stats.on_model_execution_end()
        return last_logits(outputs[0])
