"""TextLLMRunner: ExecuTorch's text generation loop (text_llm_runner.cpp, text_token_generator.h) on pterun.

Differences from ExecuTorch's, on purpose: nothing is printed (ExecuTorch prints every piece and a
report to C stdout); a token that ends inside a UTF-8 character is held back until the character is
complete (ExecuTorch raises UnicodeDecodeError inside the callback); ``get_vocab_size`` answers (ExecuTorch's
returns -1); a temperature outside [0, 1] is refused before the prompt runs (ExecuTorch refuses it after
the first token); ``stop()`` from the callback of the echo or the first token stops
(ExecuTorch clears the request when its loop starts); errors are typed PteErrors (RuntimeErrors, as
ExecuTorch's are).
"""

from __future__ import annotations

import os
from typing import Any

import torch

from pterun.errors import InvalidArgument, InvalidState
from pterun.llm import methods
from pterun.llm.base import BaseRunner, ignore
from pterun.llm.config import GenerationConfig
from pterun.llm.decoder import TextDecoder


class TextLLMRunner(BaseRunner):
    """Generates text from an LLM program exported by ExecuTorch's LLM export (or one like it).

    ``device="cuda"`` runs the program on a GPU; ``seed`` seeds temperature sampling (default: the time
    in seconds, as ExecuTorch). Further keywords go to ``Runtime.load_program``.
    """

    def __init__(self, model_path: str | os.PathLike, tokenizer_path: str | os.PathLike,
                 data_path: str | os.PathLike | None = None, *, device: str | torch.device | None = None,
                 seed: int | None = None, **load_options) -> None:
        super().__init__(model_path, tokenizer_path, data_path, device=device, seed=seed, **load_options)
        names = self.program.method_names
        self._prefill_name = methods.PREFILL if methods.FORWARD not in names and methods.PREFILL in names \
            else methods.FORWARD
        self._decode_name = methods.DECODE if methods.DECODE in names and self._prefill_name != methods.DECODE \
            else None
        self.prefiller: TextDecoder | None = None

    # -- loading -------------------------------------------------------------------

    def load(self) -> None:
        """Loads the decoder methods (generate and prefill do on first use)."""
        if self.is_loaded():
            return
        meta = self.metadata
        options: dict[str, Any] = dict(max_seq_len=meta.max_seq_len, parallel_prefill=meta.enable_dynamic_shape,
                                       stats=self.stats)
        prefiller = TextDecoder(self.program, self._prefill_name, self._device, **options)
        self.decoder = TextDecoder(self.program, self._decode_name, self._device, **options) \
            if self._decode_name else prefiller
        self.prefiller = prefiller
        self.sampler = self._make_sampler()

    # -- generation ----------------------------------------------------------------

    def generate(self, prompt: str, config: GenerationConfig | None = None, token_callback=None,
                 stats_callback=None) -> None:
        """Generates from ``prompt`` (or, when empty, from what ``prefill`` left), passing each decoded
        piece to ``token_callback`` (the prompt first when ``config.echo``) and the Stats to
        ``stats_callback``."""
        config = config if config is not None else GenerationConfig()
        self._begin(config)
        emit = token_callback if token_callback is not None else ignore
        prompt_tokens: list[int] = []
        if prompt:
            prompt_tokens = self.tokenizer.encode(prompt, config.num_bos, config.num_eos)
            self._check_room(len(prompt_tokens))
            if config.echo:
                emit(prompt)
            cur_token = self._prefill(prompt_tokens)
            self._prefill_next = None
        else:
            if self._prefill_next is None:
                raise InvalidState("Empty prompt requires a prior prefill() call")
            cur_token, self._prefill_next = self._prefill_next, None
        meta = self.metadata
        # A program whose max_seq_len is below its context is a sliding window: ExecuTorch counts no position
        # as taken there.
        occupied = 0 if meta.max_seq_len < meta.max_context_len else self.pos
        self._decode(cur_token, prompt_tokens + [cur_token], occupied, config, emit, stats_callback,
                     len(prompt_tokens) if prompt else None)

    def _check_room(self, num_prompt_tokens: int) -> None:
        if num_prompt_tokens < 1:
            raise InvalidArgument("Expected at least 1 prompt token, found 0")
        meta = self.metadata
        if meta.max_seq_len >= meta.max_context_len:
            if self.pos + num_prompt_tokens >= meta.max_context_len:
                raise InvalidArgument(
                    f"pos {self.pos} + num_prompt_tokens {num_prompt_tokens} >= max_context_len "
                    f"{meta.max_context_len}: the prompt does not fit in the context"
                )
        elif num_prompt_tokens >= meta.max_context_len:
            raise InvalidArgument(
                f"num_prompt_tokens {num_prompt_tokens} >= max_context_len {meta.max_context_len}: "
                f"the prompt exceeds the KV cache"
            )

    def _prefill(self, tokens: list[int]) -> int:
        """Feeds ``tokens`` at the current position; the next token, greedy (as ExecuTorch's prefill)."""
        assert self.prefiller is not None  # load() made it
        logits = self.prefiller.prefill(tokens, self.pos)
        self.pos += len(tokens)
        return self._greedy(logits)

    def prefill(self, prompt: str, config: GenerationConfig | None = None) -> None:
        """Feeds ``prompt`` into the KV cache without generating (chat history); ``generate("")`` goes on."""
        config = config if config is not None else GenerationConfig()
        if not self.is_loaded():
            self.load()
        tokens = self.tokenizer.encode(prompt, config.num_bos, config.num_eos)
        self._check_room(len(tokens))
        self._prefill_next = self._prefill(tokens)

    def warmup(self, prompt: str, max_new_tokens: int) -> None:
        """A generation that is not reported, then ``reset`` (ExecuTorch's TextLLMRunner::warmup)."""
        try:
            self.generate(prompt, GenerationConfig(echo=False, max_new_tokens=max_new_tokens, warming=True))
        finally:
            self.reset()

    def __repr__(self) -> str:
        return "<TextLLMRunner>"

