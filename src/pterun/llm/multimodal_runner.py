"""MultimodalRunner: ExecuTorch's multimodal generation (multimodal_runner.cpp, multimodal_prefiller.cpp) on pterun.

The inputs, in order, fill the KV cache: text is tokenized (BOS and EOS from the config for a first text input
at position 0) and embedded by ``token_embedding``, token ids are embedded as they are, an image goes through
``vision_encoder`` and preprocessed audio through ``audio_encoder``; each one's embeddings go to ``text_decoder``
from the current position. The token chosen after the last input starts generation, as in the text runner.

Differences from ExecuTorch's, on purpose (beyond those of TextLLMRunner): every input is tokenized or encoded
before any reaches the KV cache, so an input that does not fit the context, an image for a program without a
``vision_encoder`` or an image of the wrong type is refused, naming the input, with the runner as it was
(ExecuTorch has prefilled the inputs before it by then, or writes past the context); ``generate([])`` after
``prefill`` generates from the prefilled inputs (ExecuTorch refuses an empty list); an input longer than
``text_decoder`` takes at once is fed in chunks (ExecuTorch's call fails).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch

from pterun.errors import InvalidArgument, InvalidProgram, NotSupported, PteError
from pterun.llm import methods
from pterun.llm.base import BaseRunner, ignore
from pterun.llm.config import GenerationConfig
from pterun.llm.encoders import Encoder
from pterun.llm.multimodal_decoder import MultimodalDecoder
from pterun.llm.multimodal_input import MultimodalInput


class MultimodalRunner(BaseRunner):
    """Generates text from text, images and audio with a program exported for ExecuTorch's MultimodalRunner
    (optimum-executorch's image-text-to-text and multimodal-text-to-text tasks, ExecuTorch's LLaVA example).

    ``device="cuda"`` runs the program on a GPU; ``seed`` seeds temperature sampling (default: the time in
    seconds, as ExecuTorch). Further keywords go to ``Runtime.load_program``.
    """

    def __init__(self, model_path: str | os.PathLike, tokenizer_path: str | os.PathLike,
                 data_path: str | os.PathLike | None = None, *, device: str | torch.device | None = None,
                 seed: int | None = None, **load_options) -> None:
        super().__init__(model_path, tokenizer_path, data_path, device=device, seed=seed, **load_options)
        names = self.program.method_names
        missing = [name for name in (methods.TOKEN_EMBEDDING, methods.TEXT_DECODER) if name not in names]
        if missing:
            raise InvalidProgram(
                f"Missing required methods ({methods.TOKEN_EMBEDDING}, {methods.TEXT_DECODER}) in the model: "
                f"expected the methods of a multimodal export, found {sorted(names)}"
            )
        if not self.metadata.use_kv_cache:
            raise NotSupported("MultimodalRunner generates with a KV cache; the program's use_kv_cache is False")
        self.encoders: dict[str, Encoder] = {}

    def load(self) -> None:
        """Loads the methods (generate and prefill do on first use)."""
        if self.is_loaded():
            return
        decoder = MultimodalDecoder(self.program, self._device, self.stats)
        names = self.program.method_names
        self.encoders = {kind: Encoder(self.program, name, kind, self._device, decoder.dim, decoder.dtype)
                         for kind, name in methods.ENCODERS.items() if name in names}
        self.decoder = decoder
        self.sampler = self._make_sampler()

    # -- generation ----------------------------------------------------------------

    def generate(self, inputs: Sequence[MultimodalInput], config: GenerationConfig | None = None,
                 token_callback=None, stats_callback=None) -> None:
        """Prefills ``inputs`` in order and generates, passing each decoded piece to ``token_callback`` (the
        last input first, when it is text and ``config.echo``) and the Stats to ``stats_callback``. An empty
        list generates from what ``prefill`` left."""
        config = config if config is not None else GenerationConfig()
        inputs = _checked(inputs)
        self._begin(config)
        emit = token_callback if token_callback is not None else ignore
        if inputs:
            cur_token = self._prefill(inputs, config.num_bos, config.num_eos, emit if config.echo else None)
            self._prefill_next = None
        else:
            if self._prefill_next is None:
                raise InvalidArgument("MultimodalInput vector cannot be empty: expected inputs, or a prior "
                                      "prefill() to generate from")
            cur_token, self._prefill_next = self._prefill_next, None
        self._decode(cur_token, [cur_token], self.pos, config, emit, stats_callback, self.pos)

    def generate_text(self, inputs: Sequence[MultimodalInput], config: GenerationConfig | None = None) -> str:
        """The pieces ``generate`` would pass to a callback, joined (the echoed text among them)."""
        pieces: list[str] = []
        self.generate(inputs, config, pieces.append)
        return "".join(pieces)

    def prefill(self, inputs: Sequence[MultimodalInput]) -> None:
        """Feeds ``inputs`` into the KV cache without generating (chat history); no BOS or EOS is added, as in
        ExecuTorch. ``generate`` goes on from there, with more inputs or none."""
        inputs = _checked(inputs)
        if not inputs:
            raise InvalidArgument("MultimodalInput vector cannot be empty")
        if not self.is_loaded():
            self.load()
        self._prefill_next = self._prefill(inputs, 0, 0, None)

    def generate_hf(self, inputs: Any, config: GenerationConfig | None = None, image_token_id: int | None = None,
                    token_callback=None, stats_callback=None) -> None:
        """``generate`` from a transformers processor's output (pterun.llm.generate_hf)."""
        from pterun.llm.hf import generate_hf

        generate_hf(self, inputs, config, image_token_id, token_callback, stats_callback)

    def generate_text_hf(self, inputs: Any, config: GenerationConfig | None = None,
                         image_token_id: int | None = None) -> str:
        """``generate_text`` from a transformers processor's output (pterun.llm.generate_text_hf)."""
        from pterun.llm.hf import generate_text_hf

        return generate_text_hf(self, inputs, config, image_token_id)

    def _prefill(self, inputs: list[MultimodalInput], num_bos: int, num_eos: int, echo) -> int:
        """Every input's tokens or embeddings first (nothing written to the cache), the context checked, then
        each fed in turn; the token the last one's logits choose. On failure the position is as it was."""
        decoder: MultimodalDecoder = self.decoder
        assert decoder is not None  # load() made it
        prepared = []
        pos, context = self.pos, self.metadata.max_context_len
        for i, item in enumerate(inputs):
            where = f"input {i} ({item.kind})"
            with _named(where):
                payload = self._prepare(item, num_bos if i == 0 and self.pos == 0 else 0,
                                        num_eos if i == 0 and self.pos == 0 else 0)
                count = len(payload) if isinstance(payload, list) else payload.shape[1]
                if count < 1:
                    raise InvalidArgument("fills no position: expected at least one token")
                if pos + count >= context:
                    raise InvalidArgument(
                        f"fills {count} positions from position {pos}: pos + positions >= max_context_len "
                        f"{context}, it does not fit in the context"
                    )
            prepared.append((where, payload, count))
            pos += count
        start = self.pos
        try:
            for i, (where, payload, count) in enumerate(prepared):
                if echo is not None and i == len(inputs) - 1 and inputs[i].is_text():
                    echo(inputs[i].get_text())
                with _named(where):
                    logits = decoder.prefill_tokens(payload, self.pos) if isinstance(payload, list) \
                        else decoder.prefill(payload, self.pos)
                self.pos += count
        except BaseException:
            self.pos = start
            raise
        return self._greedy(logits)

    def _prepare(self, item: MultimodalInput, bos: int, eos: int) -> list[int] | torch.Tensor:
        """Token ids for text and tokens, embeddings [1, n, dim] for an image or audio."""
        if item.is_text():
            return self.tokenizer.encode(item.value, bos, eos)
        if item.is_tokens():
            return list(item.value)
        if item.is_raw_audio():
            raise NotSupported("raw audio goes to no method: ExecuTorch's MultimodalRunner takes none either; run "
                               "the audio preprocessor and pass its features with make_audio_input")
        encoder = self.encoders.get(item.kind)
        if encoder is None:
            raise InvalidArgument(f"the program has no {methods.ENCODERS[item.kind]} method for it (methods: "
                                  f"{', '.join(sorted(self.program.method_names))})")
        return encoder.encode(item.value)

    def __repr__(self) -> str:
        return "<MultimodalRunner>"


def _checked(inputs: Sequence[MultimodalInput]) -> list[MultimodalInput]:
    if isinstance(inputs, MultimodalInput | str) or not isinstance(inputs, Sequence):
        raise InvalidArgument(f"inputs must be a list of MultimodalInput, got {type(inputs).__name__}")
    odd = [f"input {i} is a {type(item).__name__}" for i, item in enumerate(inputs)
           if not isinstance(item, MultimodalInput)]
    if odd:
        raise InvalidArgument(f"inputs must be MultimodalInputs (make_text_input, make_image_input, ...): "
                              f"{'; '.join(odd)}")
    return list(inputs)


class _named:
    """Prefixes a PteError raised inside with the input it concerns (same type, same code)."""

    def __init__(self, where: str) -> None:
        self.where = where

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, error, traceback) -> None:
        if isinstance(error, PteError) and not error.message.startswith("input "):
            raise type(error)(f"{self.where}: {error.message}") from None
