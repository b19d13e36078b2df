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

Each file is written once into the program cache (tests/support/exporting.py).
"""

from __future__ import annotations

import base64
import io
from pathlib import Path

from tests.support.exporting import cache_root, locked

CORPUS = Path(__file__).parent / "text" / "corpus.txt"
VOCAB = 512
SPECIAL_TOKENS = ("<|pad|>", "<|begin_of_text|>", "<|end_of_text|>")  # ids 0, 1, 2
BOS_ID, EOS_ID = 1, 2
FILES = {"hf": "tokenizer.json", "sentencepiece": "tokenizer.model", "llama2c": "tokenizer.bin",
         "tiktoken": "tokenizer.tiktoken"}
_VERSION = "v1"  # bump to rebuild after a recipe change


def _paragraphs() -> list[str]:
    return CORPUS.read_text().split("\n\n")


def train_tokenizer(path: Path, vocab_size: int = VOCAB) -> Path:
    """The Hugging Face byte-level BPE, written to ``path``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
                                  show_progress=False)
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


def _tiktoken(path: Path) -> None:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_path("hf")))
    first = len(SPECIAL_TOKENS)
    assert sorted(tokenizer.get_vocab().values()) == list(range(VOCAB))
    # Every token is ASCII, so its byte-level text decodes to exactly its bytes.
    lines = [f"{base64.b64encode(tokenizer.decode([i]).encode()).decode()} {i - first}"
             for i in range(first, VOCAB)]
    path.write_text("\n".join(lines) + "\n")


_WRITERS = {"hf": train_tokenizer, "sentencepiece": _sentencepiece, "llama2c": _llama2c,
            "tiktoken": _tiktoken}


def tokenizer_path(kind: str = "hf") -> Path:
    path = cache_root() / f"llm-tokenizer-{_VERSION}" / FILES[kind]
    with locked(f"llm-tokenizer-{_VERSION}-{kind}"):
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(path.name + ".partial")
            _WRITERS[kind](partial)
            partial.rename(path)
        return path
