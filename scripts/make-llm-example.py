"""Builds src/pterun/examples/llm_tiny.pte and llm_tiny.tokenizer.json, the language model pterun ships.

ExecuTorch's example Llama (two layers, grouped-query attention) trained for
a few hundred steps on tests/support/text/corpus.txt, so that it continues a
prompt taken from that text with recognizable words, then exported by
ExecuTorch's LLM export (``export_llama``: KV cache, custom SDPA, metadata
methods, dynamic prompt length). The tokenizer is the byte-level BPE the LLM
tests train on the same text. Both ExecuTorch's ``TextLLMRunner`` and
``pterun.llm`` run the pair. Takes about a minute on two cores; needs the
test extras (`pip install -e '.[test]'`).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.llm_programs import export_llama_program  # noqa: E402 - importable once ROOT is on the path
from tests.support.llm_tokenizers import BOS_ID, CORPUS, EOS_ID, train_tokenizer  # noqa: E402

OUT = ROOT / "src" / "pterun" / "examples"
PTE, TOKENIZER = OUT / "llm_tiny.pte", OUT / "llm_tiny.tokenizer.json"
CONTEXT = 128
PARAMS = {"dim": 128, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "vocab_size": 512, "hidden_dim": 256,
          "norm_eps": 1e-5}
STEPS, BATCH, WINDOW = 300, 16, 64


def _token_stream(tokenizer_path: Path) -> torch.Tensor:
    """Each paragraph between BOS and EOS, one after another."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    ids = []
    for paragraph in CORPUS.read_text().split("\n\n"):
        ids += [BOS_ID, *tokenizer.encode(paragraph.strip()).ids, EOS_ID]
    return torch.tensor(ids)


def _train(stream: torch.Tensor) -> dict:
    from executorch.examples.models.llama.llama_transformer import construct_transformer
    from executorch.examples.models.llama.model_args import ModelArgs

    torch.manual_seed(0)
    args = ModelArgs(max_seq_len=CONTEXT, max_context_len=CONTEXT, generate_full_logits=True, **PARAMS)
    model = construct_transformer(args)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, STEPS)
    generator = torch.Generator().manual_seed(0)
    for step in range(STEPS):
        starts = torch.randint(0, len(stream) - WINDOW - 1, (BATCH,), generator=generator)
        batch = torch.stack([stream[s:s + WINDOW + 1] for s in starts])
        logits = model(batch[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        schedule.step()
        if step % 50 == 0 or step == STEPS - 1:
            print(f"step {step}: loss {loss.item():.3f}")
    return {k: v.detach() for k, v in model.state_dict().items()}


def main() -> None:
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as scratch:
        tokenizer = train_tokenizer(Path(scratch) / "tokenizer.json")
        state = _train(_token_stream(tokenizer))
        pte = export_llama_program(Path(scratch) / "export", "dynamic", PARAMS, state_dict=state,
                                   max_seq_len=CONTEXT, max_context_len=CONTEXT)
        shutil.copyfile(pte, PTE)
        shutil.copyfile(tokenizer, TOKENIZER)
    for path in (PTE, TOKENIZER):
        print(f"wrote {path} ({path.stat().st_size:,} bytes)")
    print(f"in {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
