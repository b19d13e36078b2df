"""Whisper's special tokens, read from its tokenizer.json by name.

A Whisper vocabulary is byte-level BPE text followed by markers written ``<|...|>``: ``<|endoftext|>``,
``<|startoftranscript|>``, one ``<|xx|>`` per language, ``<|translate|>``, ``<|transcribe|>``,
``<|startoflm|>``, ``<|startofprev|>``, ``<|nospeech|>`` (``<|nocaptions|>`` in older files),
``<|notimestamps|>`` and the timestamps ``<|0.00|>`` to ``<|30.00|>``. The tokenizer.json lists them among
its added tokens; pytorch-tokenizers (which decodes the text) does not say which ids they are, so the JSON is
read here for them. A file that is not a Hugging Face tokenizer.json (a tiktoken file, say) has no such list
and is refused.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

from pterun.errors import AccessFailed, InvalidArgument

TOKENIZER_FILE = "tokenizer.json"  # the file a tokenizer directory holds (as ExecuTorch's Whisper runner reads)
_MARKER = re.compile(r"<\|[^|]*\|>")
_LANGUAGE = re.compile(r"<\|([a-z]{2,3})\|>")
_REQUIRED = ("<|endoftext|>", "<|startoftranscript|>", "<|notimestamps|>")


def tokenizer_file(path: str | os.PathLike) -> str:
    """The tokenizer.json itself: ``path``, or the tokenizer.json inside it when it is a directory."""
    path = os.fspath(path)
    return os.path.join(path, TOKENIZER_FILE) if os.path.isdir(path) else path


@dataclass(frozen=True)
class WhisperVocabulary:
    eot: int
    sot: int
    no_timestamps: int
    transcribe: int | None
    translate: int | None
    sot_prev: int | None
    sot_lm: int | None
    no_speech: int | None
    languages: dict[str, int]  # language code ("en") -> its token, in the file's order
    special: frozenset[int]  # every <|...|> marker: never part of the text

    @classmethod
    def read(cls, path: str | os.PathLike) -> WhisperVocabulary:
        path = tokenizer_file(path)
        try:
            with open(path, "rb") as file:
                document = json.load(file)
        except OSError as error:
            raise AccessFailed(f"Failed to load tokenizer from: {path}: {error.strerror or error}") from None
        except ValueError:
            raise InvalidArgument(
                f"{path}: expected Whisper's tokenizer.json (JSON with its special tokens), found another format"
            ) from None
        added = document.get("added_tokens") if isinstance(document, dict) else None
        if not isinstance(added, list):
            raise InvalidArgument(f"{path}: expected a Hugging Face tokenizer.json with added_tokens, found none")
        ids: dict[str, int] = {}
        for entry in added:
            if isinstance(entry, dict) and isinstance(entry.get("content"), str) and _is_id(entry.get("id")):
                ids.setdefault(entry["content"], entry["id"])
        missing = [name for name in _REQUIRED if name not in ids]
        if missing:
            raise InvalidArgument(
                f"{path}: expected Whisper's special tokens, found no {', '.join(missing)} among its added tokens"
            )
        languages = {match.group(1): token for name, token in ids.items() if (match := _LANGUAGE.fullmatch(name))}
        return cls(
            eot=ids["<|endoftext|>"], sot=ids["<|startoftranscript|>"], no_timestamps=ids["<|notimestamps|>"],
            transcribe=ids.get("<|transcribe|>"), translate=ids.get("<|translate|>"),
            sot_prev=ids.get("<|startofprev|>"), sot_lm=ids.get("<|startoflm|>"),
            no_speech=ids.get("<|nospeech|>", ids.get("<|nocaptions|>")),
            languages=languages,
            special=frozenset(token for name, token in ids.items() if _MARKER.fullmatch(name)),
        )

    def never_generated(self) -> tuple[int, ...]:
        """The markers that belong to prompts, never to a transcript: what Whisper suppresses while decoding
        (OpenAI's decoding and the generation configs of Hugging Face's Whisper models alike)."""
        markers = (self.translate, self.transcribe, self.sot, self.sot_prev, self.sot_lm, self.no_speech)
        return tuple(token for token in markers if token is not None)


def _is_id(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
