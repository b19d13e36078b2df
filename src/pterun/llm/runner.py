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

import copy
import os
import threading
from typing import Any

import torch

from pterun.core.device import Device
from pterun.errors import InvalidArgument, InvalidState
from pterun.llm.config import GenerationConfig
from pterun.llm.decoder import TextDecoder
from pterun.llm.metadata import read_metadata
from pterun.llm.sampler import Sampler
from pterun.llm.stats import Stats, time_in_ms
from pterun.llm.tokenizer import PieceStream, Tokenizer
from pterun.runtime import Runtime

PREFILL_METHOD, DECODE_METHOD, FORWARD_METHOD = "prefill", "decode", "forward"


class TextLLMRunner:
    """Generates text from an LLM program exported by ExecuTorch's LLM export (or one like it).

    ``device="cuda"`` runs the program on a GPU; ``seed`` seeds temperature sampling (default: the time
    in seconds, as ExecuTorch). Further keywords go to ``Runtime.load_program``.
    """

    def __init__(self, model_path: str | os.PathLike, tokenizer_path: str | os.PathLike,
                 data_path: str | os.PathLike | None = None, *, device: str | torch.device | None = None,
                 seed: int | None = None, **load_options) -> None:
        self.tokenizer = Tokenizer(tokenizer_path)
        self.stats = Stats()
        self.program = Runtime.get().load_program(os.fspath(model_path), data_path=data_path or None,
                                                  device=device, **load_options)
        self.metadata = read_metadata(self.program)
        names = self.program.method_names
        self._prefill_name = PREFILL_METHOD if FORWARD_METHOD not in names and PREFILL_METHOD in names \
            else FORWARD_METHOD
        self._decode_name = DECODE_METHOD if DECODE_METHOD in names and self._prefill_name != DECODE_METHOD \
            else None
        self._device = Device.parse(self.program.device).torch
        self.eos_ids = frozenset(self.metadata.eos_ids if self.metadata.eos_ids is not None
                                 else (self.tokenizer.eos_tok,))
        self._sampler_seed = seed
        self.prefiller: TextDecoder | None = None
        self.decoder: TextDecoder | None = None
        self.sampler: Sampler | None = None
        self.pos = 0
        self._prefill_next: int | None = None
        self._stop = threading.Event()

    # -- loading -------------------------------------------------------------------

    def is_loaded(self) -> bool:
        return self.prefiller is not None

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
        # ExecuTorch samples from the tokenizer's vocabulary: logits past it are never chosen.
        self.sampler = Sampler(self.tokenizer.vocab_size, seed=self._sampler_seed)
        self.prefiller = prefiller

    def get_vocab_size(self) -> int:
        """The program's vocabulary (its get_vocab_size, else the tokenizer's)."""
        vocab = self.metadata.vocab_size
        return vocab if vocab is not None else self.tokenizer.vocab_size

    # -- generation ----------------------------------------------------------------

    def generate(self, prompt: str, config: GenerationConfig | None = None, token_callback=None,
                 stats_callback=None) -> None:
        """Generates from ``prompt`` (or, when empty, from what ``prefill`` left), passing each decoded
        piece to ``token_callback`` (the prompt first when ``config.echo``) and the Stats to
        ``stats_callback``."""
        config = config if config is not None else GenerationConfig()
        temperature = config.temperature
        if not 0.0 <= temperature <= 1.0:
            raise InvalidArgument(f"Temperature must be in [0, 1], got {temperature:f}")
        stats = self.stats
        if not self.is_loaded():
            stats.model_load_start_ms = time_in_ms()
            self.load()
            stats.model_load_end_ms = time_in_ms()
        emit = token_callback if token_callback is not None else _ignore
        self._stop.clear()
        stats.inference_start_ms = time_in_ms()
        stats.model_execution_start_ms = stats.model_execution_end_ms = 0
        meta = self.metadata
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
        effective_pos = 0 if meta.max_seq_len < meta.max_context_len else self.pos
        max_new_tokens = config.resolve_max_new_tokens(meta.max_context_len, effective_pos)
        if max_new_tokens <= 0:
            raise InvalidArgument(
                f"Max new tokens {max_new_tokens} is less than or equal to 0: the context of "
                f"{meta.max_context_len} tokens is full at position {self.pos} (seq_len {config.seq_len})"
            )
        stats.first_token_ms = stats.prompt_eval_end_ms = time_in_ms()
        pieces = PieceStream(self.tokenizer, emit)
        pieces.push(cur_token, cur_token)  # ExecuTorch decodes the first as (cur, cur)
        history = prompt_tokens + [cur_token]
        generated = self._generate_tokens(history, max_new_tokens - 1, temperature, pieces)
        pieces.flush()
        self.pos += generated
        stats.inference_end_ms = time_in_ms()
        stats.num_prompt_tokens = len(prompt_tokens) if prompt else self.pos
        stats.num_generated_tokens = generated
        if stats_callback is not None:
            stats_callback(copy.copy(stats))  # a snapshot, as ExecuTorch's binding passes a copy

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
        assert self.prefiller is not None and self.sampler is not None  # load() made them
        logits = self.prefiller.prefill(tokens, self.pos)
        self.pos += len(tokens)
        self.sampler.set_temperature(0.0)
        return self.sampler.sample(logits)

    def _generate_tokens(self, tokens: list[int], max_new_tokens: int, temperature: float,
                         pieces: PieceStream) -> int:
        """ExecuTorch's TextTokenGenerator loop: feed the last token, sample the next, until EOS, stop or
        ``max_new_tokens``; returns how many tokens were fed."""
        decoder, sampler, stats, eos_ids = self.decoder, self.sampler, self.stats, self.eos_ids
        assert decoder is not None and sampler is not None  # load() made them
        sampler.set_temperature(temperature)
        start = pos = self.pos
        cur_token = tokens[-1]
        history = tokens  # what a program without a KV cache is fed every step
        while pos < start + max_new_tokens and not self._stop.is_set():
            if decoder.use_kv_cache:
                logits = decoder.decode_step(cur_token, pos)
            else:
                logits = decoder.step(history, 0)
            stats.on_sampling_begin()
            prev_token, cur_token = cur_token, sampler.sample(logits)
            stats.on_sampling_end()
            pos += 1
            history.append(cur_token)
            pieces.push(prev_token, cur_token)
            if self._stop.is_set() or cur_token in eos_ids:
                break
        return pos - start

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

    def stop(self) -> None:
        """Ends the current generation after the token being produced (from a callback or another thread)."""
        self._stop.set()

    def reset(self) -> None:
        """Starts over at position 0: later tokens overwrite the cache and the mask hides the rest."""
        self.stats.reset()
        self.pos = 0
        self._prefill_next = None

    def __repr__(self) -> str:
        return "<TextLLMRunner>"


def _ignore(piece: str) -> None:
    pass
