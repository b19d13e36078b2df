"""TranscribeConfig: how one transcription decodes (ExecuTorch's Seq2SeqTranscribeConfig, and Whisper's prompt)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from pterun.errors import InvalidArgument, InvalidArgumentType

TASKS = ("transcribe", "translate")
# Whisper's own sample length: half its text context of 448 positions, the most a window's transcript needs.
# A longer run is the model repeating itself; optimum-executorch's exports size the cache larger (1024) than
# the decoder's 448 position embeddings, so a longer run would also index past them.
DEFAULT_MAX_NEW_TOKENS = 224


@dataclass(frozen=True)
class TranscribeConfig:
    """What a transcription decodes with.

    ``language`` is a code the tokenizer has a token for ("en", "de", ...); None detects it from the first
    window as Whisper does (multilingual models only). ``task`` is "transcribe" or "translate" (into English).
    Decoding is greedy at ``temperature`` 0, else sampled as ExecuTorch's sampler samples (top-p 0.9, seeded
    by ``seed``). Each window generates at most ``max_new_tokens`` tokens, fewer where the program's cache
    ends first, and stops at an EOS: ``eos_token_ids``, else the program's, else ``<|endoftext|>``.

    ``suppress_tokens`` are never generated: None suppresses the prompt's markers (``<|startoftranscript|>``,
    the tasks, ``<|startofprev|>``, ``<|startoflm|>``, ``<|nospeech|>``), as Whisper does; pass a Hugging Face
    generation config's ``suppress_tokens`` for its full list, or () for none. ``suppress_blank`` keeps a
    window from starting with a blank or ending at once (Whisper's ``begin_suppress_tokens``: the space token
    and ``<|endoftext|>``).
    """

    language: str | None = None
    task: str = "transcribe"
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    temperature: float = 0.0
    seed: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    suppress_tokens: tuple[int, ...] | None = None
    suppress_blank: bool = True

    def __post_init__(self) -> None:
        if self.language is not None and not isinstance(self.language, str):
            raise InvalidArgumentType(f"language: expected a language code such as 'en', found "
                                      f"{type(self.language).__name__}")
        if self.task not in TASKS:
            raise InvalidArgument(f"task: expected one of {', '.join(TASKS)}, found {self.task!r}")
        if isinstance(self.max_new_tokens, bool) or not isinstance(self.max_new_tokens, int):
            raise InvalidArgumentType(f"max_new_tokens: expected an int, found {type(self.max_new_tokens).__name__}")
        if self.max_new_tokens <= 0:
            raise InvalidArgument(f"max_new_tokens must be positive, got {self.max_new_tokens}")
        if not isinstance(self.temperature, (int, float)) or isinstance(self.temperature, bool) \
                or not 0.0 <= self.temperature <= 1.0:
            raise InvalidArgument(f"temperature must be in [0, 1], got {self.temperature!r}")
        object.__setattr__(self, "eos_token_ids", _ids("eos_token_ids", self.eos_token_ids))
        if self.suppress_tokens is not None:
            object.__setattr__(self, "suppress_tokens", _ids("suppress_tokens", self.suppress_tokens))


def _ids(name: str, values: Iterable[int]) -> tuple[int, ...]:
    try:
        ids = tuple(values)
    except TypeError:
        raise InvalidArgumentType(f"{name}: expected token ids, found {type(values).__name__}") from None
    for token in ids:
        if isinstance(token, bool) or not isinstance(token, int) or token < 0:
            raise InvalidArgument(f"{name}: expected non-negative int token ids, found {token!r}")
    return ids
