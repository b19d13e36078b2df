"""What ExecuTorch's text and multimodal runners share: the program and its metadata, the tokenizer, the
sampler, the position in the KV cache, and the generation after the prefill (text_token_generator.h).

A runner prefills its inputs its own way (text, or text and other media), then calls ``_decode`` with the
token the prefill chose: the first piece, then ExecuTorch's token loop (feed the last token, sample the
next, until EOS, ``stop()``, the context or ``max_new_tokens``), then the Stats.
"""

from __future__ import annotations

import copy
import os
import threading
from typing import Any

import torch

from pterun.core.device import Device
from pterun.errors import InvalidArgument
from pterun.llm.config import GenerationConfig
from pterun.llm.metadata import read_metadata
from pterun.llm.sampler import Sampler
from pterun.llm.stats import Stats, time_in_ms
from pterun.llm.tokenizer import PieceStream, Tokenizer
from pterun.runtime import Runtime


class BaseRunner:
    """The state and the generation loop of a runner; subclasses load their decoders and prefill."""

    def __init__(self, model_path: str | os.PathLike, tokenizer_path: str | os.PathLike,
                 data_path: str | os.PathLike | None = None, *, device: str | torch.device | None = None,
                 seed: int | None = None, **load_options) -> None:
        self.tokenizer = Tokenizer(tokenizer_path)
        self.stats = Stats()
        self.program = Runtime.get().load_program(os.fspath(model_path), data_path=data_path or None,
                                                  device=device, **load_options)
        self.metadata = read_metadata(self.program)
        self._device = Device.parse(self.program.device).torch
        self.eos_ids = frozenset(self.metadata.eos_ids if self.metadata.eos_ids is not None
                                 else (self.tokenizer.eos_tok,))
        self._sampler_seed = seed
        self.sampler: Sampler | None = None
        # What the token loop feeds: decode_step(token, pos), or step(history, 0) without a KV cache.
        self.decoder: Any = None
        self.pos = 0
        self._prefill_next: int | None = None
        self._stop = threading.Event()

    def is_loaded(self) -> bool:
        return self.sampler is not None

    def load(self) -> None:
        raise NotImplementedError

    def _make_sampler(self) -> Sampler:
        # ExecuTorch samples from the tokenizer's vocabulary: logits past it are never chosen.
        return Sampler(self.tokenizer.vocab_size, seed=self._sampler_seed)

    def get_vocab_size(self) -> int:
        """The program's vocabulary (its get_vocab_size, else the tokenizer's)."""
        vocab = self.metadata.vocab_size
        return vocab if vocab is not None else self.tokenizer.vocab_size

    def _begin(self, config: GenerationConfig) -> None:
        """What every generate() does first: the temperature checked, the program loaded, the clock started."""
        if not 0.0 <= config.temperature <= 1.0:
            raise InvalidArgument(f"Temperature must be in [0, 1], got {config.temperature:f}")
        stats = self.stats
        if not self.is_loaded():
            stats.model_load_start_ms = time_in_ms()
            self.load()
            stats.model_load_end_ms = time_in_ms()
        self._stop.clear()
        stats.inference_start_ms = time_in_ms()
        stats.model_execution_start_ms = stats.model_execution_end_ms = 0

    def _decode(self, cur_token: int, history: list[int], occupied: int, config: GenerationConfig, emit,
                stats_callback, num_prompt_tokens: int | None) -> None:
        """Generation from the token the prefill chose: ``history`` is what a program without a KV cache is fed
        (the prompt and that token), ``occupied`` the positions ``resolve_max_new_tokens`` counts as taken;
        ``num_prompt_tokens`` None reports the position after generation (ExecuTorch's text runner does so for a
        generation from a prefill)."""
        stats = self.stats
        max_new_tokens = config.resolve_max_new_tokens(self.metadata.max_context_len, occupied)
        if max_new_tokens <= 0:
            raise InvalidArgument(
                f"Max new tokens {max_new_tokens} is less than or equal to 0: the context of "
                f"{self.metadata.max_context_len} tokens is full at position {self.pos} (seq_len {config.seq_len})"
            )
        stats.first_token_ms = stats.prompt_eval_end_ms = time_in_ms()
        pieces = PieceStream(self.tokenizer, emit)
        pieces.push(cur_token, cur_token)  # ExecuTorch decodes the first as (cur, cur)
        generated = self._generate_tokens(history, max_new_tokens - 1, config.temperature, pieces)
        pieces.flush()
        self.pos += generated
        stats.inference_end_ms = time_in_ms()
        stats.num_prompt_tokens = self.pos if num_prompt_tokens is None else num_prompt_tokens
        stats.num_generated_tokens = generated
        if stats_callback is not None:
            stats_callback(copy.copy(stats))  # a snapshot, as ExecuTorch's binding passes a copy

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

    def _greedy(self, logits: torch.Tensor) -> int:
        """The token a prefill chooses: always the likeliest, as ExecuTorch's prefill samples at temperature 0."""
        assert self.sampler is not None  # load() made it
        self.sampler.set_temperature(0.0)
        return self.sampler.sample(logits)

    def stop(self) -> None:
        """Ends the current generation after the token being produced (from a callback or another thread)."""
        self._stop.set()

    def reset(self) -> None:
        """Starts over at position 0: later tokens overwrite the cache and the mask hides the rest."""
        self.stats.reset()
        self.pos = 0
        self._prefill_next = None


def ignore(piece: str) -> None:
    pass
