"""Tokenizers for the LLM test programs, in each format ExecuTorch's runner reads, from the shipped text.

All are trained on tests/support/text/corpus.txt and cover its characters
only (plain ASCII), so every token a random model samples decodes as UTF-8 on
its own (ExecuTorch's runner raises on a piece that does not):

- "hf": a Hugging Face tokenizer.json, byte-level BPE; <|pad|>, <|begin_of_text|>
  and <|end_of_text|> are ids 0, 1, 2, the programs' BOS and EOS.
- "sentencepiece": a SentencePiece BPE model; <unk>, <s>, </s> are ids 0, 1, 2.
- "llama2c": that SentencePiece model in Llama 2's binary format.
- "tiktoken": the Hugging Face tokenizer's tokens as a tiktoken file (id - 3 is
  the rank); ExecuTorch's reader appends Llama 3's 256 special tokens after
  them, so its BOS and EOS are ids 509 and 510 there.
- "tekken": the same tokens as Mistral's tekken.json (read by that name), after
  three control tokens <unk>, <s>, </s>: its ids are the Hugging Face ones.

and one that breaks the rule on purpose:

- "bytes": a byte-level BPE over all 256 bytes, so that many of its tokens are
  parts of a UTF-8 character (what the runner's text stream must hold back).

Each file is written once into the program cache (tests/support/exporting.py).
"""

from __future__ import annotations

import base64
import io
import json
from functools import partial
from pathlib import Path

from tests.support.exporting import cache_root, locked

CORPUS = Path(__file__).parent / "text" / "corpus.txt"
VOCAB = 512
SPECIAL_TOKENS = ("<|pad|>", "<|begin_of_text|>", "<|end_of_text|>")  # ids 0, 1, 2
BOS_ID, EOS_ID = 1, 2
FILES = {"hf": "tokenizer.json", "sentencepiece": "tokenizer.model", "llama2c": "tokenizer.bin",
         "tiktoken": "tokenizer.tiktoken", "tekken": "tekken.json", "bytes": "bytes.tokenizer.json"}
FORMATS = ("hf", "sentencepiece", "llama2c", "tiktoken", "tekken")  # every token whole ASCII text
_VERSION = "v1"  # bump to rebuild after a recipe change


def _paragraphs() -> list[str]:
    return CORPUS.read_text().split("\n\n")


def train_tokenizer(path: Path, vocab_size: int = VOCAB, *, all_bytes: bool = False) -> Path:
    """The Hugging Face byte-level BPE, written to ``path``: over the corpus' characters, or every byte."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet() if all_bytes else []
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=alphabet, show_progress=False)
    tokenizer.train_from_iterator(_paragraphs(), trainer)
    assert tokenizer.get_vocab_size() == vocab_size, f"the corpus gives {tokenizer.get_vocab_size()} tokens"
    path.parent.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(path))
    return path


def _sentencepiece(path: Path) -> None:
    import sentencepiece

    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(_paragraphs()), model_writer=model, vocab_size=VOCAB, model_type="bpe",
        character_coverage=1.0, unk_id=0, bos_id=BOS_ID, eos_id=EOS_ID, pad_id=-1, minloglevel=2,
    )
    path.write_bytes(model.getvalue())


def _llama2c(path: Path) -> None:
    from pytorch_tokenizers.llama2c import Llama2cTokenizer

    Llama2cTokenizer(str(tokenizer_path("sentencepiece"))).export(str(path))


def _ranked_tokens() -> list[bytes]:
    """The Hugging Face tokenizer's tokens after its special ones, in id order (a rank-ordered BPE)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_path("hf")))
    assert sorted(tokenizer.get_vocab().values()) == list(range(VOCAB))
    # Every token is ASCII, so its byte-level text decodes to exactly its bytes.
    return [tokenizer.decode([i]).encode() for i in range(len(SPECIAL_TOKENS), VOCAB)]


def _tiktoken(path: Path) -> None:
    lines = [f"{base64.b64encode(token).decode()} {rank}" for rank, token in enumerate(_ranked_tokens())]
    path.write_text("\n".join(lines) + "\n")


def _tekken(path: Path) -> None:
    ranks = _ranked_tokens()
    specials = [{"rank": i, "token_str": s, "is_control": True}
                for i, s in enumerate(["<unk>", "<s>", "</s>"])]
    vocab = [{"rank": i, "token_bytes": base64.b64encode(t).decode(), "token_str": None}
             for i, t in enumerate(ranks)]
    pattern = r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    config = {"pattern": pattern, "num_vocab_tokens": len(ranks), "default_vocab_size": VOCAB,
              "default_num_special_tokens": len(specials), "version": "v7"}
    path.write_text(json.dumps({"config": config, "vocab": vocab, "special_tokens": specials}))


_WRITERS = {"hf": train_tokenizer, "sentencepiece": _sentencepiece, "llama2c": _llama2c,
            "tiktoken": _tiktoken, "tekken": _tekken, "bytes": partial(train_tokenizer, all_bytes=True)}


def tokenizer_path(kind: str = "hf") -> Path:
    path = cache_root() / f"llm-tokenizer-{_VERSION}" / FILES[kind]
    with locked(f"llm-tokenizer-{_VERSION}-{kind}"):
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            unfinished = path.with_name(path.name + ".partial")
            _WRITERS[kind](unfinished)
            unfinished.rename(path)
        return path
