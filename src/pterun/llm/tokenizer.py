"""Tokenizers as ExecuTorch's runner loads them, through pytorch-tokenizers (the library it uses).

The format is chosen by the file's content: a Hugging Face tokenizer.json, a tiktoken file
(base64 token and rank per line), a SentencePiece model (a protobuf), Llama 2's binary
vocabulary, or Mistral's tekken.json. ExecuTorch tries every loader in turn (each failure
logs); reading the bytes first means only the loader that fits runs, and a file none accepts
is one error naming what was tried.
"""

from __future__ import annotations

import codecs
import json
import os
import re
from collections.abc import Callable

from pterun.errors import AccessFailed, InvalidArgument, NotSupported

_TIKTOKEN_LINE = re.compile(rb"^[A-Za-z0-9+/]+={0,2} \d+\r?$")


def candidate_formats(data: bytes, name: str = "") -> list[str]:
    """The formats a tokenizer file's bytes can be, most likely first: "tekken", "hf", "tiktoken",
    "sentencepiece", "llama2c". Mistral's Tekken is JSON too, told apart by its file name as ExecuTorch
    does; a SentencePiece protobuf and Llama 2's binary can look alike (a vocabulary of 10 mod 256 starts
    like a protobuf's first field), so those two are tried in turn."""
    if data.lstrip()[:1] == b"{":
        try:
            json.loads(data)
            return ["tekken", "hf"] if name.endswith("tekken.json") else ["hf"]
        except ValueError:
            pass
    if _TIKTOKEN_LINE.match(data.split(b"\n", 1)[0]):
        return ["tiktoken"]
    # A SentencePiece ModelProto starts with field 1 (its pieces), length-delimited: tag 0x0a.
    return ["sentencepiece", "llama2c"] if data[:1] == b"\x0a" else ["llama2c", "sentencepiece"]


class Tokenizer:
    """A loaded tokenizer: encode with BOS/EOS counts, and each token's bytes for decoding."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)
        try:
            with open(self.path, "rb") as file:
                data = file.read()
        except OSError as error:
            raise AccessFailed(f"Failed to load tokenizer from: {self.path}: {error.strerror}") from None
        try:
            import pytorch_tokenizers.pytorch_tokenizers_cpp
        except ImportError:
            raise NotSupported("pterun.llm needs pytorch-tokenizers (pip install pterun[llm])") from None
        cpp = pytorch_tokenizers.pytorch_tokenizers_cpp
        classes = {"tekken": cpp.Tekken, "hf": cpp.HFTokenizer, "tiktoken": cpp.Tiktoken,
                   "sentencepiece": cpp.SPTokenizer, "llama2c": cpp.Llama2cTokenizer}
        failures = []
        for kind in candidate_formats(data, self.path):
            impl = classes[kind]()
            try:
                impl.load(self.path)
            except RuntimeError as error:
                failures.append(f"read as {_NAMES[kind]}: {error}")
                continue
            if impl.is_loaded():
                break
            failures.append(f"read as {_NAMES[kind]}: not loaded")
        else:
            raise InvalidArgument(f"Failed to load tokenizer from: {self.path}: {'; '.join(failures)}")
        self.kind = kind
        self._impl = impl
        self.bos_tok = int(impl.bos_tok())
        self.eos_tok = int(impl.eos_tok())
        self.vocab_size = int(impl.vocab_size())

    def encode(self, text: str, bos: int = 0, eos: int = 0) -> list[int]:
        try:
            return list(self._impl.encode(text, bos, eos))
        except RuntimeError as error:
            raise InvalidArgument(f"Failed to encode prompt {text!r}: {error}") from None

    def token_bytes(self, token: int) -> bytes:
        """The bytes ``token`` decodes to: not always whole UTF-8 characters (byte-level vocabularies)."""
        try:
            return self._impl.decode(token).encode("utf-8", "surrogatepass")
        except UnicodeDecodeError as error:
            # The library hands back str; bytes that are not UTF-8 on their own are still in the error.
            return bytes(error.object)
        except RuntimeError as error:
            raise InvalidArgument(f"Failed to decode token {token}: {error}") from None

    def piece_bytes(self, prev: int, token: int) -> bytes:
        """``token``'s bytes where ``prev`` came before it: SentencePiece vocabularies (and Llama 2's, made
        from them) drop the leading space of a word right after BOS, as their C++ decode(prev, token) does."""
        data = self.token_bytes(token)
        if prev == self.bos_tok and self.kind in _SPACE_AFTER_BOS and data[:1] == b" ":
            return data[1:]
        return data

    def decode(self, tokens: list[int]) -> str:
        return b"".join(self.token_bytes(t) for t in tokens).decode("utf-8", "replace")

    def __repr__(self) -> str:
        return f"<Tokenizer {self.kind} {self.path!r} vocab_size={self.vocab_size}>"


_SPACE_AFTER_BOS = ("sentencepiece", "llama2c")
_NAMES = {"tekken": "a Tekken tokenizer (tekken.json)", "hf": "a Hugging Face tokenizer.json",
          "tiktoken": "a tiktoken file", "sentencepiece": "a SentencePiece model",
          "llama2c": "a Llama 2 binary tokenizer"}


class PieceStream:
    """Tokens' bytes in, text out: a token that ends inside a UTF-8 character is held back until the
    character is complete (ExecuTorch passes such bytes to the callback, where they raise
    UnicodeDecodeError). A token whose bytes are whole characters passes as its own piece, as in ExecuTorch.
    """

    def __init__(self, tokenizer: Tokenizer, emit: Callable[[str], None]) -> None:
        self._tokenizer = tokenizer
        self._emit = emit
        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")

    def push(self, prev: int, token: int) -> None:
        text = self._utf8.decode(self._tokenizer.piece_bytes(prev, token))
        if text or not self._utf8.getstate()[0]:
            self._emit(text)

    def flush(self) -> None:
        """What is still held back, with the incomplete character replaced by U+FFFD."""
        if self._utf8.getstate()[0]:
            self._emit(self._utf8.decode(b"", final=True))
