"""Builds src/pterun/examples/llama_tiny.pte, the program `pterun run` runs by default.

A Llama-style decoder (transformers' LlamaForCausalLM: RMSNorm, rotary
embeddings, grouped-query attention, SwiGLU MLP) built from a small config
with random weights, exported with ExecuTorch's exporter for a prompt of up
to 64 tokens. Needs the test extras (`pip install -e '.[test]'`).
"""

from __future__ import annotations

from pathlib import Path

import torch
from executorch.exir import to_edge_transform_and_lower
from torch.export import Dim, export
from transformers import LlamaConfig, LlamaForCausalLM

OUT = Path(__file__).resolve().parent.parent / "src" / "pterun" / "examples" / "llama_tiny.pte"
MAX_TOKENS = 64


class Logits(torch.nn.Module):
    def __init__(self, model: LlamaForCausalLM) -> None:
        super().__init__()
        self.model = model

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=tokens, use_cache=False).logits


def main() -> None:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=1024, hidden_size=128, intermediate_size=352, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=MAX_TOKENS, tie_word_embeddings=False,
    )
    model = Logits(LlamaForCausalLM(config).eval())
    tokens = torch.randint(0, config.vocab_size, (1, 16))
    with torch.no_grad():
        exported = export(model, (tokens,), dynamic_shapes={"tokens": {1: Dim("tokens", min=1, max=MAX_TOKENS)}})
    program = to_edge_transform_and_lower(exported).to_executorch()
    OUT.write_bytes(program.buffer)
    print(f"wrote {OUT} ({OUT.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main()
