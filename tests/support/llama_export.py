"""ExecuTorch's example Llama through ExecuTorch's own LLM export (export_llama), tiny and cached.

Random weights from a fixed seed, KV cache and custom SDPA, the metadata methods the exporter
writes; dynamic-length prefill or one token per call. The export runs in a subprocess (it sets
process-wide state of its own) and is cached like every other export (tests/support/exporting.py).
Tokenizers are trained here from text in this file: nothing is downloaded.
"""

from __future__ import annotations

import base64
import json
import subprocess
import sys
from pathlib import Path

from tests.support.exporting import locked, publish, scratch

PARAMS = {"dim": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "vocab_size": 320, "hidden_dim": 128,
          "norm_eps": 1e-5}
MAX_SEQ_LEN = 128
TEXT = """The quick brown fox jumps over the lazy dog. A small language model learns to continue text
one token at a time, and the runner feeds each new token back in while the cache keeps what came before.
Every prompt is split into pieces; every piece has a number; the numbers go in and logits come out."""
# Text whose characters take several bytes, for a byte-level vocabulary with partial characters.
WIDE_TEXT = "Caf\u00e9 cr\u00e8me, na\u00efve r\u00e9sum\u00e9 \u2014 \u65e5\u672c\u8a9e \U0001F600 " + TEXT


def llama_program(dynamic: bool, eos_ids: tuple[int, ...] = (2,), *, kv_cache: bool = True,
                  dtype: str = "fp32") -> Path:
    """The .pte of the example Llama (max_seq_len 128): with a KV cache and custom SDPA, or without a
    cache (every call takes the whole sequence)."""
    kind = ("kv-sdpa" if kv_cache else "nokv") + ("" if dtype == "fp32" else f"-{dtype}")
    key = f"llm-export-llama-{kind}-{'dynamic' if dynamic else 'static'}-eos{len(eos_ids)}-{min(eos_ids)}-v1"
    with locked(key) as directory:
        if not (directory / "program.pte").exists():
            partial = scratch(directory)
            arguments = f"{str(partial)!r}, {dynamic}, {list(eos_ids)}, {kv_cache}, {dtype!r}"
            code = f"from tests.support.llama_export import _export; _export({arguments})"
            done = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).parents[2],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            if done.returncode:
                raise RuntimeError(f"export_llama failed:\n{done.stderr[-4000:]}")
            publish(partial, directory)
        return directory / "program.pte"


def _export(directory: str, dynamic: bool, eos_ids: list[int], kv_cache: bool, dtype: str) -> None:
    import torch
    from executorch.examples.models.llama.export_llama_lib import export_llama
    from executorch.examples.models.llama.llama_transformer import construct_transformer
    from executorch.examples.models.llama.model_args import ModelArgs
    from executorch.extension.llm.export.config.llm_config import DtypeOverride, LlmConfig

    out = Path(directory)
    (out / "params.json").write_text(json.dumps(PARAMS))
    torch.manual_seed(0)
    model = construct_transformer(ModelArgs(**PARAMS, max_seq_len=MAX_SEQ_LEN, max_context_len=MAX_SEQ_LEN))
    torch.save(model.state_dict(), out / "checkpoint.pth")
    config = LlmConfig()
    config.base.params = str(out / "params.json")
    config.base.checkpoint = str(out / "checkpoint.pth")
    config.base.metadata = json.dumps({"get_bos_id": 1, "get_eos_ids": eos_ids})
    config.model.use_kv_cache = kv_cache
    config.model.use_sdpa_with_kv_cache = kv_cache
    config.model.enable_dynamic_shape = dynamic
    config.model.dtype_override = DtypeOverride(dtype)
    config.export.max_seq_length = MAX_SEQ_LEN
    config.export.max_context_length = MAX_SEQ_LEN
    config.export.output_dir = directory
    config.export.output_name = str(out / "exported.pte")  # taken as is, not under output_dir
    export_llama(config)
    (out / "exported.pte").rename(out / "program.pte")


def bpe_tokenizer(path: Path, *, byte_alphabet: bool = False) -> Path:
    """A byte-level BPE tokenizer.json trained on TEXT. Without the byte alphabet every token is
    whole ASCII text; with it (trained on WIDE_TEXT) many tokens are parts of a UTF-8 character."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet() if byte_alphabet else []
    trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=["<unk>", "<s>", "</s>"],
                                  initial_alphabet=alphabet, show_progress=False)
    tokenizer.train_from_iterator([WIDE_TEXT if byte_alphabet else TEXT], trainer)
    tokenizer.save(str(path))
    return path


def sentencepiece_tokenizers(directory: Path) -> dict[str, Path]:
    """A SentencePiece BPE model trained on TEXT, and the same vocabulary in Llama 2's binary format."""
    import sentencepiece
    from pytorch_tokenizers import Llama2cTokenizer

    (directory / "text.txt").write_text(TEXT)
    text, prefix = str(directory / "text.txt"), str(directory / "sp")
    sentencepiece.SentencePieceTrainer.train(input=text, model_prefix=prefix, vocab_size=60, model_type="bpe",
                                             minloglevel=2)
    Llama2cTokenizer(model_path=str(directory / "sp.model")).export(str(directory / "tokenizer.bin"))
    return {"sentencepiece": directory / "sp.model", "llama2c": directory / "tokenizer.bin"}


def tekken_tokenizer(path: Path) -> Path:
    """A Tekken file (Mistral's format, read by its name tekken.json): the 128 ASCII bytes (every token is
    whole text) and one merge ("th"), after three control tokens."""
    specials = [{"rank": i, "token_str": s, "is_control": True}
                for i, s in enumerate(["<unk>", "<s>", "</s>"])]
    ranks = [bytes([b]) for b in range(128)] + [b"th"]
    vocab = [{"rank": i, "token_bytes": base64.b64encode(t).decode(), "token_str": None}
             for i, t in enumerate(ranks)]
    pattern = r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    config = {"pattern": pattern, "num_vocab_tokens": len(ranks), "default_vocab_size": len(ranks) + 3,
              "default_num_special_tokens": 3, "version": "v7"}
    path.write_text(json.dumps({"config": config, "vocab": vocab, "special_tokens": specials}))
    return path
