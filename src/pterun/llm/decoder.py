"""One decoder method of an LLM program called the way ExecuTorch's TextDecoderRunner calls it.

Inputs are as the method declares them: tokens ``[1, n]`` (embeddings ``[1, n, dim]`` for a multimodal
program's text_decoder), then (with a KV cache) the start position ``[1]`` or the cache positions ``[n]``.
``decode_step`` is the one call per generated token. Every call's inputs are views of tensors allocated
once, so that a call of a length seen before passes the same addresses: a method that runs as CUDA graphs
binds its inputs by address, and replays a prompt's graph only where its tokens come at the address they were
captured with (a new tensor per prompt made a repeated prompt length capture, replay, capture again).
"""

from __future__ import annotations

import torch

from pterun.core.dtype import to_torch
from pterun.errors import InvalidProgram, NotSupported

INTEGER_DTYPES = (torch.int64, torch.int32)  # what token and position inputs may be


class TextDecoder:
    def __init__(self, program, method_name: str, device: torch.device, *, max_seq_len: int,
                 parallel_prefill: bool, stats) -> None:
        self.method = program.load_method(method_name)
        self.name = method_name
        self.stats = stats
        meta = self.method.method_meta()
        where = f"method {method_name!r}"
        if meta.num_inputs() < 1:
            raise InvalidProgram(f"{where} is not a text decoder: expected a tokens input [1, n], found none")
        tokens = meta.input_tensor_meta(0)
        dtype = to_torch(tokens.dtype())
        if len(tokens.sizes()) != 2 or tokens.sizes()[0] != 1 or dtype not in INTEGER_DTYPES:
            raise InvalidProgram(
                f"{where} is not a text decoder: expected a tokens input [1, n] of int64, found "
                f"{list(tokens.sizes())} of {dtype}"
            )
        if meta.num_outputs() != 1:
            raise InvalidProgram(f"{where}: expected one output, the logits; found {meta.num_outputs()}")
        self.max_tokens = tokens.sizes()[1]  # the upper bound of a dynamic length, else the length
        self.token_dtype = dtype
        self.device = device
        self.use_kv_cache = meta.num_inputs() > 1
        if self.use_kv_cache:
            self.positions = Positions(meta, device)
        # Prompts go in whole (in chunks of at most max_seq_len) where the metadata says the length is
        # dynamic, else one token at a time, as ExecuTorch's TextPrefiller does; one token at a time also
        # where the method takes exactly one.
        fixed = tokens.dynamism() == "static"
        self.parallel_prefill = (parallel_prefill or not self.use_kv_cache) and self.max_tokens > 1
        if fixed and self.max_tokens != 1:
            raise NotSupported(
                f"{where} takes exactly {self.max_tokens} tokens per call: expected a dynamic length "
                f"or one token per call"
            )
        self.chunk = min(max_seq_len if max_seq_len > 0 else 128, self.max_tokens)
        self._token = torch.zeros((1, 1), dtype=self.token_dtype, device=device)
        self._tokens = torch.zeros((1, self.max_tokens), dtype=self.token_dtype, device=device)

    def step(self, tokens: list[int], start_pos: int) -> torch.Tensor:
        """Logits of the last of ``tokens`` fed at ``start_pos`` (the whole sequence without a KV cache)."""
        if len(tokens) <= self.max_tokens:
            ids = self._tokens[:, :len(tokens)]
            ids.copy_(torch.tensor([tokens], dtype=self.token_dtype))
        else:  # more than the method takes: passed as they are, for the method to refuse
            ids = torch.tensor([tokens], dtype=self.token_dtype, device=self.device)
        if not self.use_kv_cache:
            return self._run([ids])
        return self._run([ids, self.positions.of(start_pos, len(tokens))])

    def decode_step(self, token: int, pos: int) -> torch.Tensor:
        """Logits after one token at ``pos``: the per-token call of generation (KV-cached programs)."""
        self._token.fill_(token)
        return self._run([self._token, self.positions.one(pos)])

    def _run(self, inputs: list) -> torch.Tensor:
        return run_decoder(self.method, inputs, self.stats)

    def prefill(self, tokens: list[int], start_pos: int) -> torch.Tensor:
        """Feeds the prompt from ``start_pos``; the logits after its last token."""
        if self.parallel_prefill:
            for begin in range(0, len(tokens), self.chunk):
                logits = self.step(tokens[begin:begin + self.chunk], start_pos + begin)
            return logits
        for offset, token in enumerate(tokens):
            logits = self.decode_step(token, start_pos + offset)
        return logits


class Positions:
    """A decoder's position input (its second), as the method declares it: the start position ``[1]`` or the
    cache positions ``[n]`` (ExecuTorch's populate_start_pos_or_cache_position)."""

    def __init__(self, meta, device: torch.device) -> None:
        info = meta.input_tensor_meta(1)
        sizes = info.sizes()
        self.dtype = to_torch(info.dtype())
        if len(sizes) != 1 or self.dtype not in INTEGER_DTYPES:
            raise InvalidProgram(
                f"method {meta.name()!r}: expected a position input [1] or [n] of int64 after the first, found "
                f"{list(sizes)} of {self.dtype}"
            )
        self.cache_positions = sizes[0] > 1
        self.device = device
        self._one = torch.zeros((1,), dtype=self.dtype, device=device)
        self._span = torch.zeros((sizes[0],), dtype=self.dtype, device=device)

    def of(self, start: int, count: int) -> torch.Tensor:
        """The positions of ``count`` entries from ``start``."""
        if not self.cache_positions:
            return self.one(start)
        if count > len(self._span):  # more than the method takes: for the method to refuse
            return torch.arange(start, start + count, dtype=self.dtype, device=self.device)
        return torch.arange(start, start + count, dtype=self.dtype, device=self.device, out=self._span[:count])

    def one(self, pos: int) -> torch.Tensor:
        """The position of one entry, in a tensor allocated once (the per-token call)."""
        self._one.fill_(pos)
        return self._one


def run_decoder(method, inputs: list, stats) -> torch.Tensor:
    """The logits of the last position after one call of a decoder method, timed into ``stats``."""
    stats.on_model_execution_begin()
    outputs = method.execute(inputs, clone_outputs=False)
    stats.on_model_execution_end()
    return last_logits(outputs[0])


def last_logits(logits: torch.Tensor) -> torch.Tensor:
    """The last position's row of a decoder's logits ([1, n, vocab], or [n, vocab] or [vocab])."""
    return logits[0, -1] if logits.dim() == 3 else logits.reshape(-1, logits.shape[-1])[-1]
