"""Exports the LLM benchmark programs through ExecuTorch's LLM export, and a tokenizer for them.

    python bench/llm_export.py [--out .cache/bench/llm] [--size 100m|1b]

Writes OUT/llama100m.pte (portable), OUT/llama100m.xnnpack-8da4w.pte (XNNPACK, 8-bit dynamic
activations and 4-bit weights in groups of 32) and OUT/tokenizer.json. The model is ExecuTorch's
example Llama at about 100M parameters (bench/models.py's llama100m shape) with weights drawn from a
small codebook; ``--size 1b`` writes OUT/llama1b.xnnpack-8da4w.pte and OUT/tokenizer.1b.json instead,
Llama-3.2-1B's layers (``SIZES``) with a 32000-token vocabulary (only 8da4w: the float32 program would be
4.4 GB), exported by ``export_llama`` as a user exports a checkpoint: KV cache, custom SDPA,
metadata methods, prompts of 1 to 511 tokens per call. Its EOS token's output row is zero, so greedy
decoding never picks it (its logit is 0, the largest of the others is positive) and every run makes
exactly the tokens asked for. Files that exist are kept (delete them to export again).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(Path(__file__).resolve().parent), str(ROOT)]
from models import codebook  # noqa: E402

from tests.support.llm_programs import export_llama_program  # noqa: E402
from tests.support.llm_tokenizers import EOS_ID, SPECIAL_TOKENS  # noqa: E402  (BOS 1, EOS 2)

PARAMS = {"dim": 768, "n_layers": 12, "n_heads": 12, "n_kv_heads": 4, "vocab_size": 16384, "hidden_dim": 2048,
          "norm_eps": 1e-5}
SIZES = {  # the benchmarks' model sizes (this file's and bench/llm_gpu.py's)
    "100m": PARAMS,
    "1b": {**PARAMS, "dim": 2048, "n_layers": 16, "n_heads": 32, "n_kv_heads": 8, "hidden_dim": 8192,
           "vocab_size": 32000},
    "tiny": {**PARAMS, "dim": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "hidden_dim": 128, "vocab_size": 512},
}
CONTEXT = 512
# llm_programs' variants, by size
VARIANTS = {"100m": {"llama100m.pte": "dynamic", "llama100m.xnnpack-8da4w.pte": "xnnpack-8da4w"},
            "1b": {"llama1b.xnnpack-8da4w.pte": "xnnpack-8da4w"}}


def tokenizer_name(size: str) -> str:
    return "tokenizer.json" if size == "100m" else f"tokenizer.{size}.json"


def _byte_chars() -> dict[int, str]:
    """GPT-2's byte-to-character table, which a byte-level BPE's vocabulary is written in."""
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    table, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            table[byte] = chr(byte)
        else:
            table[byte] = chr(256 + extra)
            extra += 1
    return table


def write_tokenizer(path: Path, vocab_size: int = PARAMS["vocab_size"]) -> Path:
    """A byte-level BPE of exactly ``vocab_size`` tokens over printable ASCII: the characters, then merges of
    two characters, then of a pair and a character. Every token is ASCII, so each piece a random model
    picks decodes as UTF-8 on its own (ExecuTorch's runner raises on one that does not)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    chars = _byte_chars()
    alphabet = [chars[b] for b in (10, *range(32, 127))]
    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS)}
    for c in alphabet:
        vocab[c] = len(vocab)
    merges = []
    pairs = [(a, b) for a in alphabet for b in alphabet]
    triples = ((a + b, c) for a, b in pairs for c in alphabet)
    for left, right in (*pairs, *triples):
        if len(vocab) == vocab_size:
            break
        if left + right not in vocab:
            merges.append((left, right))
            vocab[left + right] = len(vocab)
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(t, special=True) for t in SPECIAL_TOKENS])
    assert tokenizer.get_vocab_size() == vocab_size, tokenizer.get_vocab_size()
    path.parent.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(path))
    return path


def _checkpoint(params: dict) -> dict:
    from executorch.examples.models.llama.llama_transformer import construct_transformer
    from executorch.examples.models.llama.model_args import ModelArgs

    torch.manual_seed(0)
    model = codebook(construct_transformer(ModelArgs(max_seq_len=CONTEXT, max_context_len=CONTEXT, **params)))
    state = model.state_dict()
    state["output.weight"][EOS_ID] = 0.0
    if params["dim"] > PARAMS["dim"]:
        # bf16, as checkpoints ship: half the memory while export_llama loads it into its float32 model (the
        # 1B size's float32 weights twice over would not fit a 24 GB machine)
        state = {k: v.bfloat16() if v.is_floating_point() else v for k, v in state.items()}
    return state


def export(path: Path, variant: str, params: dict, state: dict, scratch: Path) -> None:
    started = time.perf_counter()
    # Not a directory named for the variant: llama_config says why a checkpoint's path must not name it.
    written = export_llama_program(scratch / "llama", variant, params, max_seq_len=CONTEXT,
                                   max_context_len=CONTEXT, state_dict=state)
    written.replace(path)
    print(f"{path.name}: {path.stat().st_size / 2**20:.1f} MiB in {time.perf_counter() - started:.0f} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=ROOT / ".cache" / "bench" / "llm")
    parser.add_argument("--size", choices=sorted(VARIANTS), default="100m")
    args = parser.parse_args()
    params = SIZES[args.size]
    args.out.mkdir(parents=True, exist_ok=True)
    if not (args.out / tokenizer_name(args.size)).exists():
        write_tokenizer(args.out / tokenizer_name(args.size), params["vocab_size"])
    missing = {name: variant for name, variant in VARIANTS[args.size].items() if not (args.out / name).exists()}
    state = _checkpoint(params) if missing else None
    with tempfile.TemporaryDirectory() as scratch:
        for name, variant in missing.items():
            export(args.out / name, variant, params, state, Path(scratch))


if __name__ == "__main__":
    main()
