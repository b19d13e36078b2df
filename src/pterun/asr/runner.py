"""Seq2SeqRunner: speech to text with an exported Whisper-style encoder-decoder program, from Python.

ExecuTorch's runner for these programs (``extension/asr/runner``, Seq2SeqRunner) is C++ only and starts
from features its caller computed. This one starts from audio and decodes as Whisper does:

- the audio is cut into consecutive 30 s windows (the last padded with silence), and each window's
  log-mel features are the ones transformers' ``WhisperFeatureExtractor`` gives for those 30 s;
- each window is decoded from Whisper's prompt, ``<|startoftranscript|>``, the language, the task and
  ``<|notimestamps|>`` (``<|startoftranscript|><|notimestamps|>`` for English-only models); without a
  language the first window's is detected (the likeliest language token after ``<|startoftranscript|>``)
  and kept for the rest, as Whisper's ``transcribe`` keeps it;
- tokens are chosen greedily (or sampled) with the prompt's markers suppressed and, at a window's first
  token, the blank and EOS, until an EOS, ``max_new_tokens`` or the end of the program's cache;
- the text is the window's text tokens, decoded by the tokenizer; markers (languages, timestamps, EOS)
  are never text. Each window's pieces reach ``token_callback`` as they are decoded.

A window's tokens equal those of transformers' ``generate`` on the same features with the same prompt and
suppression (tests/asr). ExecuTorch's runner feeds ``decoder_start_token_id`` alone and takes each argmax.
"""

from __future__ import annotations

import copy
import os
import threading
from dataclasses import dataclass
from typing import Any

import torch

from pterun.asr.audio import waveform
from pterun.asr.config import TranscribeConfig
from pterun.asr.features import HOP_LENGTH, SAMPLE_RATE, log_mel_spectrogram
from pterun.asr.program import check_signature, find_methods, read_metadata
from pterun.asr.vocabulary import WhisperVocabulary, tokenizer_file
from pterun.core.device import Device
from pterun.errors import InvalidArgument, InvalidArgumentType, InvalidProgram
from pterun.llm.sampler import Sampler
from pterun.llm.stats import Stats, time_in_ms
from pterun.llm.tokenizer import PieceStream, Tokenizer
from pterun.runtime import Runtime

# Every English-only Whisper (tiny.en to medium.en, distil-*.en) has this vocabulary: GPT-2's 50,257 tokens
# and the markers; multilingual ones have one text token more. OpenAI's Whisper tells them apart the same way.
ENGLISH_ONLY_VOCAB = 51864


@dataclass(frozen=True)
class _Decoding:
    config: TranscribeConfig
    eos: frozenset[int]
    suppress: torch.Tensor | None  # never generated
    begin_suppress: torch.Tensor | None  # not a window's first token
    sampler: Sampler


@dataclass(frozen=True)
class Segment:
    """One window's transcript."""

    start: float  # seconds from the start of the audio
    end: float
    language: str | None  # the language code of its prompt (None for English-only models)
    tokens: tuple[int, ...]  # the decoder's tokens: the prompt, then what was generated (the EOS included)
    text: str


@dataclass(frozen=True)
class Transcription:
    text: str
    segments: tuple[Segment, ...]

    @property
    def language(self) -> str | None:
        return self.segments[0].language if self.segments else None


class Seq2SeqRunner:
    """Transcribes speech with a Whisper program exported by optimum-executorch (or one like it).

    ``tokenizer_path`` is the model's tokenizer.json, or a directory holding it. ``device="cuda"`` runs the
    program and the feature extraction on a GPU; further keywords go to ``Runtime.load_program``.
    """

    def __init__(self, model_path: str | os.PathLike, tokenizer_path: str | os.PathLike,
                 data_path: str | os.PathLike | None = None, *, device: str | torch.device | None = None,
                 **load_options) -> None:
        self.vocabulary = WhisperVocabulary.read(tokenizer_path)
        self.tokenizer = Tokenizer(tokenizer_file(tokenizer_path))
        self.stats = Stats()
        self.program = Runtime.get().load_program(os.fspath(model_path), data_path=data_path or None,
                                                  device=device, **load_options)
        self._method_names = find_methods(self.program)
        self.metadata = read_metadata(self.program)
        self._device = Device.parse(self.program.device).torch
        self.encoder: Any = None  # the methods, once loaded
        self.decoder: Any = None
        self._stop = threading.Event()

    # -- loading -------------------------------------------------------------------

    def is_loaded(self) -> bool:
        return self.decoder is not None

    def load(self) -> None:
        """Loads and checks the encoder and decoder methods (transcribe does on first use)."""
        if self.is_loaded():
            return
        self.stats.model_load_start_ms = time_in_ms()
        encoder, decoder = (self.program.load_method(name) for name in self._method_names)
        signature = check_signature(encoder, decoder)
        vocabulary, path = self.vocabulary, self.tokenizer.path
        markers = {"<|startoftranscript|>": vocabulary.sot, "<|endoftext|>": vocabulary.eot,
                   "<|notimestamps|>": vocabulary.no_timestamps,
                   **{f"<|{code}|>": token for code, token in vocabulary.languages.items()}}
        for name, token in markers.items():
            if token >= signature.vocab:
                raise InvalidArgument(f"tokenizer {path}: {name} is token {token}, past the program's "
                                      f"{signature.vocab} logits: the tokenizer of another model?")
        start = self.metadata.decoder_start_token_id
        if start is not None and start != vocabulary.sot:
            raise InvalidArgument(f"tokenizer {path}: <|startoftranscript|> is token {vocabulary.sot}, the "
                                  f"program's decoder_start_token_id is {start}: the tokenizer of another model?")
        self.signature = signature
        self.multilingual = bool(vocabulary.languages) and signature.vocab != ENGLISH_ONLY_VOCAB
        blank = [t for t in self.tokenizer.encode(" ") if t not in vocabulary.special]
        self._blank = tuple(blank) if len(blank) == 1 else ()
        device = self._device
        self._token = torch.zeros((1, 1), dtype=signature.token_dtype, device=device)
        self._position = torch.zeros((1,), dtype=signature.position_dtype, device=device)
        self._languages = torch.tensor(list(vocabulary.languages.values()), dtype=torch.long, device=device)
        self.encoder, self.decoder = encoder, decoder
        self.stats.model_load_end_ms = time_in_ms()

    # -- transcription -------------------------------------------------------------

    def transcribe(self, audio, sample_rate: int = SAMPLE_RATE, config: TranscribeConfig | None = None,
                   token_callback=None, stats_callback=None) -> Transcription:
        """The transcript of ``audio`` (mono float samples at 16 kHz, ``[n]``), window by window; each piece of
        text goes to ``token_callback`` as it is decoded, the run's Stats to ``stats_callback``."""
        audio = waveform(audio, sample_rate)
        decoding = self._decoding(config)
        window = self.signature.n_frames * HOP_LENGTH
        self._begin()
        audio = audio.to(self._device)
        segments: list[Segment] = []
        language = decoding.config.language
        for begin in range(0, audio.shape[0], window):
            if self._stop.is_set():
                break
            features = log_mel_spectrogram(audio[begin:begin + window], self.signature.n_mels, window)
            tokens, language, text = self._window(features, language, decoding, token_callback)
            end = min(begin + window, audio.shape[0])
            segments.append(Segment(begin / sample_rate, end / sample_rate, language, tuple(tokens), text))
        self._end(stats_callback)
        return Transcription("".join(s.text for s in segments), tuple(segments))

    def transcribe_features(self, features: torch.Tensor, config: TranscribeConfig | None = None,
                            token_callback=None, stats_callback=None) -> list[int]:
        """One window's tokens (the prompt, then what was generated) from its log-mel ``features``
        (``[n_mels, n_frames]`` or ``[1, n_mels, n_frames]``, as the feature extractor gives them): ExecuTorch's
        ``Seq2SeqRunner::transcribe``, with Whisper's prompt."""
        decoding = self._decoding(config)
        features = self._check_features(features)
        self._begin()
        tokens, _, _ = self._window(features, decoding.config.language, decoding, token_callback)
        self._end(stats_callback)
        return tokens

    def stop(self) -> None:
        """Ends the current transcription after the token being produced (from a callback or another thread)."""
        self._stop.set()

    def _decoding(self, config: TranscribeConfig | None) -> _Decoding:
        """What every window of one call decodes with, checked against the program before any work."""
        if config is None:
            config = TranscribeConfig()
        elif not isinstance(config, TranscribeConfig):
            raise InvalidArgumentType(f"config: expected a TranscribeConfig, found {type(config).__name__}")
        self.load()
        vocab, vocabulary = self.signature.vocab, self.vocabulary
        if config.language is not None or not self.multilingual:
            self._prompt(config.language, config.task)  # refuses a language or task the model lacks
        suppress = vocabulary.never_generated() if config.suppress_tokens is None else config.suppress_tokens
        past = [t for t in (*suppress, *config.eos_token_ids) if t >= vocab]
        if past:
            raise InvalidArgument(f"token ids {past} are past the program's {vocab} logits")
        device = self._device
        return _Decoding(
            config=config,
            eos=frozenset(config.eos_token_ids or self.metadata.eos_ids or (vocabulary.eot,)),
            suppress=torch.tensor(suppress, dtype=torch.long, device=device) if suppress else None,
            begin_suppress=torch.tensor(self._blank + (vocabulary.eot,), dtype=torch.long, device=device)
            if config.suppress_blank else None,
            sampler=Sampler(vocab, config.temperature, seed=config.seed),
        )

    def _check_features(self, features) -> torch.Tensor:
        expected = [self.signature.n_mels, self.signature.n_frames]
        if not isinstance(features, torch.Tensor):
            raise InvalidArgumentType(f"features: expected a torch.Tensor {expected}, found {type(features).__name__}")
        shape = list(features.shape)
        if shape not in (expected, [1, *expected]) or not features.dtype.is_floating_point:
            raise InvalidArgument(f"features: expected log-mel features {expected} (or [1, ...]) of floats, as the "
                                  f"program's encoder takes them, found {shape} of {features.dtype}")
        return features.reshape(expected).to(self._device)

    def _begin(self) -> Stats:
        self._stop.clear()
        stats = self.stats
        stats.reset()
        stats.inference_start_ms = time_in_ms()
        return stats

    def _end(self, stats_callback) -> None:
        self.stats.inference_end_ms = time_in_ms()
        if stats_callback is not None:
            stats_callback(copy.copy(self.stats))

    # -- one window ----------------------------------------------------------------

    def _window(self, features: torch.Tensor, language: str | None, decoding: _Decoding,
                token_callback) -> tuple[list[int], str | None, str]:
        stats, vocabulary = self.stats, self.vocabulary
        inputs = features.to(self.signature.feature_dtype)[None]
        stats.on_model_execution_begin()
        states = self.encoder.execute([inputs], clone_outputs=False)[0]
        stats.on_model_execution_end()
        if not stats.prompt_eval_end_ms:
            stats.prompt_eval_end_ms = time_in_ms()
        stats.num_prompt_tokens += int(states.shape[1])

        logits = self._step(vocabulary.sot, 0, states)
        if self.multilingual and language is None:
            language = self._detect_language(logits)
        prompt = self._prompt(language, decoding.config.task)
        for position, token in enumerate(prompt[1:], start=1):
            logits = self._step(token, position, states)

        limit = self._room(len(prompt), decoding.config.max_new_tokens)
        tokens = list(prompt)
        texts: list[str] = []

        def emit(piece: str) -> None:
            texts.append(piece)
            if token_callback is not None:
                token_callback(piece)

        pieces = PieceStream(self.tokenizer, emit)
        while True:
            if decoding.suppress is not None:
                logits = logits.index_fill(0, decoding.suppress, float("-inf"))
            if decoding.begin_suppress is not None and len(tokens) == len(prompt):
                logits = logits.index_fill(0, decoding.begin_suppress, float("-inf"))
            stats.on_sampling_begin()
            token = decoding.sampler.sample(logits)
            stats.on_sampling_end()
            if not stats.first_token_ms:
                stats.first_token_ms = time_in_ms()
            stats.num_generated_tokens += 1
            tokens.append(token)
            if token not in vocabulary.special:
                pieces.push(tokens[-2], token)
            if token in decoding.eos or self._stop.is_set() or len(tokens) - len(prompt) == limit:
                break
            logits = self._step(token, len(tokens) - 1, states)
        pieces.flush()
        return tokens, language, "".join(texts)

    def _step(self, token: int, position: int, states: torch.Tensor) -> torch.Tensor:
        self._token.fill_(token)
        self._position.fill_(position)
        self.stats.on_model_execution_begin()
        logits = self.decoder.execute([self._token, states, self._position], clone_outputs=False)[0]
        self.stats.on_model_execution_end()
        return logits.reshape(-1, logits.shape[-1])[-1]

    def _detect_language(self, logits: torch.Tensor) -> str:
        """The likeliest language token after ``<|startoftranscript|>`` (Whisper's detect_language)."""
        index = int(torch.argmax(logits[self._languages]))
        return list(self.vocabulary.languages)[index]

    def _prompt(self, language: str | None, task: str) -> list[int]:
        vocabulary = self.vocabulary
        if not self.multilingual:
            if language not in (None, "en") or task != "transcribe":
                raise InvalidArgument(
                    f"this is an English-only model: it transcribes English, found language={language!r} "
                    f"task={task!r}"
                )
            return [vocabulary.sot, vocabulary.no_timestamps]
        if language is None:
            raise InvalidArgument("a multilingual model's prompt needs a language: give one, or let it be detected")
        code = language[2:-2] if language.startswith("<|") and language.endswith("|>") else language.lower()
        if code not in vocabulary.languages:
            raise InvalidArgument(f"language {language!r}: expected one of the tokenizer's language codes, "
                                  f"{', '.join(vocabulary.languages)}")
        task_token = vocabulary.transcribe if task == "transcribe" else vocabulary.translate
        if task_token is None:
            raise InvalidArgument(f"task {task!r}: the tokenizer {self.tokenizer.path} has no <|{task}|> token")
        return [vocabulary.sot, vocabulary.languages[code], task_token, vocabulary.no_timestamps]

    def _room(self, prompt_length: int, max_new_tokens: int) -> int:
        """How many tokens a window may generate: ``max_new_tokens``, or fewer where the cache ends (the last
        token generated is never fed back)."""
        cache = self.metadata.max_seq_len
        if cache is None:
            return max_new_tokens
        room = cache - prompt_length + 1
        if room < 1:
            raise InvalidProgram(f"the decoder's cache holds {cache} positions, fewer than the prompt's "
                                 f"{prompt_length}")
        return min(max_new_tokens, room)

    def __repr__(self) -> str:
        return "<Seq2SeqRunner>"
