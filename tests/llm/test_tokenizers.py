"""Tokenizer files of each format ExecuTorch's runner reads, made here from text, chosen by content."""

from __future__ import annotations

import base64

import pytest

from pterun.errors import AccessFailed, InvalidArgument
from pterun.llm.tokenizer import PieceStream, Tokenizer, candidate_formats
from tests.support.llm_tokenizers import VOCAB
from tests.support.llm_tokenizers import tokenizer_path as tokenizer_file


def test_hf_tokenizer_json(tokenizer_path):
    tokenizer = Tokenizer(tokenizer_path)
    assert tokenizer.kind == "hf"
    tokens = tokenizer.encode("The quick brown fox")
    assert tokenizer.decode(tokens) == "The quick brown fox"


def test_tiktoken_file(tmp_path):
    ranks = [bytes([b]) for b in range(256)] + [b"th", b"he", b" t", b"the"]
    path = tmp_path / "tokenizer.model"
    path.write_bytes(b"".join(base64.b64encode(token) + b" %d\n" % rank for rank, token in enumerate(ranks)))
    tokenizer = Tokenizer(path)
    assert tokenizer.kind == "tiktoken"
    tokens = tokenizer.encode("the theme")
    assert 259 in tokens and tokenizer.decode(tokens) == "the theme"


def test_sentencepiece_model_and_llama2_binary():
    model = tokenizer_file("sentencepiece")
    sentencepiece = Tokenizer(model)
    assert sentencepiece.kind == "sentencepiece"
    assert candidate_formats(model.read_bytes())[0] == "sentencepiece"
    binary = Tokenizer(tokenizer_file("llama2c"))
    assert binary.kind == "llama2c"
    for tokenizer in (sentencepiece, binary):
        tokens = tokenizer.encode("the quick fox", 1, 0)
        assert tokens[0] == tokenizer.bos_tok == 1
        assert tokenizer.vocab_size == VOCAB
        word = tokens[1]
        assert tokenizer.token_bytes(word) == b" the"  # premise: the word's piece starts with its space
        assert tokenizer.piece_bytes(1, word) == b"the"  # after BOS the space goes, as in ExecuTorch
        assert tokenizer.piece_bytes(word, word) == b" the"


def test_missing_and_wrong_files_are_typed_errors(tmp_path):
    with pytest.raises(AccessFailed, match="Failed to load tokenizer from: .*missing.json"):
        Tokenizer(tmp_path / "missing.json")
    (tmp_path / "junk.bin").write_bytes(b"\x00\x01 not a tokenizer at all")
    with pytest.raises(InvalidArgument, match="Llama 2 binary.*SentencePiece"):
        Tokenizer(tmp_path / "junk.bin")
    (tmp_path / "other.json").write_text('{"not": "a tokenizer"}')
    with pytest.raises(InvalidArgument, match="Hugging Face"):
        Tokenizer(tmp_path / "other.json")


def test_pieces_hold_back_partial_characters(byte_tokenizer_path):
    tokenizer = Tokenizer(byte_tokenizer_path)
    text = "na\u00efve \u65e5\u672c\u8a9e \U0001F600!"
    tokens = tokenizer.encode(text)
    partial = [t for t in tokens if _not_text(tokenizer, t)]
    assert partial, "premise: some tokens are parts of a UTF-8 character"
    pieces = []
    stream = PieceStream(tokenizer, pieces.append)
    for prev, token in zip([tokens[0]] + tokens, tokens):
        stream.push(prev, token)
    stream.flush()
    assert "".join(pieces) == text
    assert len(pieces) < len(tokens)


def test_an_unfinished_character_is_replaced_at_the_end(byte_tokenizer_path):
    tokenizer = Tokenizer(byte_tokenizer_path)
    first = tokenizer.encode("\u65e5")[0]
    assert _not_text(tokenizer, first), "premise: the character's first byte is a token of its own"
    pieces = []
    stream = PieceStream(tokenizer, pieces.append)
    stream.push(first, first)
    assert pieces == []
    stream.flush()
    assert pieces == ["\ufffd"]


def _not_text(tokenizer, token) -> bool:
    try:
        tokenizer.token_bytes(token).decode("utf-8")
        return False
    except UnicodeDecodeError:
        return True


def test_tekken_json_by_its_name(tmp_path, tokenizer_path):
    tekken = Tokenizer(tokenizer_file("tekken"))
    assert tekken.kind == "tekken" and (tekken.bos_tok, tekken.eos_tok) == (1, 2)
    tokens = tekken.encode("the theme", 1, 0)
    # The Hugging Face tokenizer's tokens in rank order, after the three control tokens: the same ids.
    assert tokens[0] == 1 and tokens[1:] == Tokenizer(tokenizer_path).encode("the theme")
    assert len(tokens) - 1 < len("the theme"), "premise: merges made tokens of several characters"
    assert tekken.decode(tokens[1:]) == "the theme"
    # A Hugging Face file of that name is still read as what it is, as ExecuTorch falls back.
    (tmp_path / "hf").mkdir()
    renamed = tmp_path / "hf" / "tekken.json"
    renamed.write_bytes(tokenizer_path.read_bytes())
    assert Tokenizer(renamed).kind == "hf"
