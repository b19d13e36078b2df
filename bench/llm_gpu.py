"""LLM decode on a GPU: pterun.llm against Hugging Face transformers' generate (static cache, torch.compile).

    python bench/llm_gpu.py export [--out .cache/bench/llm]     # here, with ExecuTorch: the .pte, xz-compressed
    python bench/llm_gpu.py run --dir DIR [--new-tokens 128]      # on the GPU machine

``export --tiny`` writes the same program at a size of a few thousand weights (2 layers, width 64, a 512-token
vocabulary): the test suite exports it so that the export step cannot break unseen (tests/test_gpu_tools.py).

The model is a Llama-architecture decoder of about 100M parameters in bfloat16 (bench/llm_export.py's shape:
dim 768, 12 layers, 12 heads sharing 4 KV heads, hidden 2048, vocab 16384), each matrix's weights two values
of either sign (so the file compresses to travel; speed does not depend on the values), exported from
transformers' LlamaForCausalLM with its static cache (``TorchExportableModuleWithStaticCache``), the program
optimum-executorch writes, with the metadata methods the runner reads. Its positions are tensors, so pterun
replays each decode step as one CUDA graph.

``run`` times, for prompt 128 and 128 new tokens (greedy, EOS never chosen):
- pterun.llm's TextLLMRunner on the .pte (device="cuda"), from its own Stats;
- transformers' ``generate`` on the same model (the same weights, made the same way) with
  ``cache_implementation="static"``, which transformers compiles (``mode="reduce-overhead"``: CUDA graphs);
- the floor: the weights' bytes over the device-to-device copy bandwidth measured here, per token.
"""

from __future__ import annotations

import argparse
import json
import lzma
import shutil
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import copy_bandwidth  # noqa: E402
from llm import prompt_of  # noqa: E402
from llm_export import CONTEXT, PARAMS, write_tokenizer  # noqa: E402  (puts the repository on the path)
from models import codebook  # noqa: E402

from tests.support.llm_tokenizers import BOS_ID, EOS_ID  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
NAME = "hf_llama100m.bf16.pte"
TINY = {**PARAMS, "dim": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "hidden_dim": 128, "vocab_size": 512}


def hf_model(params: dict = PARAMS):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=params["vocab_size"], hidden_size=params["dim"], intermediate_size=params["hidden_dim"],
        num_hidden_layers=params["n_layers"], num_attention_heads=params["n_heads"],
        num_key_value_heads=params["n_kv_heads"], max_position_embeddings=CONTEXT, rms_norm_eps=params["norm_eps"],
        bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=0, tie_word_embeddings=False,
    )
    model = codebook(LlamaForCausalLM(config)).eval().requires_grad_(False)
    with torch.no_grad():
        # Two values per matrix (its mean magnitude, either sign): the file must travel compressed to the GPU
        # machine, and decode speed does not depend on the values.
        for p in model.parameters():
            if p.dim() >= 2:
                p.copy_(torch.where(p >= 0, 1.0, -1.0) * p.abs().mean())
        model.lm_head.weight[EOS_ID].zero_()  # greedy decoding never picks EOS: every run makes the tokens asked
    return model.to(torch.bfloat16)


def export(out: Path, params: dict = PARAMS) -> Path:
    from executorch.exir import to_edge_transform_and_lower
    from transformers import GenerationConfig
    from transformers.integrations.executorch import TorchExportableModuleWithStaticCache

    class Decoder(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.inner = TorchExportableModuleWithStaticCache(model, batch_size=1, max_cache_len=CONTEXT)

        def forward(self, input_ids, cache_position):
            return self.inner(input_ids=input_ids, cache_position=cache_position)

    model = hf_model(params)
    model.generation_config = GenerationConfig(use_cache=True, cache_implementation="static",
                                               cache_config={"batch_size": 1, "max_cache_len": CONTEXT})
    seq = torch.export.Dim("seq_length", min=1, max=CONTEXT - 1)
    tokens = torch.tensor([[BOS_ID, 5, 6]])
    exported = torch.export.export(Decoder(model).eval(), (tokens, torch.arange(3)),
                                   dynamic_shapes=({1: seq}, {0: seq}), strict=True)
    metadata = {"get_max_seq_len": CONTEXT, "get_max_context_len": CONTEXT, "get_vocab_size": params["vocab_size"],
                "get_bos_id": BOS_ID, "get_eos_ids": [EOS_ID], "use_kv_cache": True,
                "use_sdpa_with_kv_cache": False, "enable_dynamic_shape": True}
    program = to_edge_transform_and_lower(exported, constant_methods=metadata).to_executorch()
    out.mkdir(parents=True, exist_ok=True)
    with lzma.open(out / (NAME + ".xz"), "wb", preset=6) as f:
        f.write(program.buffer)
    write_tokenizer(out / "tokenizer.json", params["vocab_size"])
    return out / (NAME + ".xz")


def run(directory: Path, new_tokens: int, rounds: int) -> None:
    from pterun.llm import GenerationConfig, TextLLMRunner

    pte = directory / NAME
    if not pte.exists():
        with lzma.open(directory / (NAME + ".xz")) as src, open(pte, "wb") as dst:
            shutil.copyfileobj(src, dst)
    tokenizer = directory / "tokenizer.json"
    runner = TextLLMRunner(str(pte), str(tokenizer), device="cuda")
    prompt = prompt_of(tokenizer, 128)
    config = GenerationConfig(temperature=0.0, echo=False, max_new_tokens=new_tokens)
    ours = []
    for _ in range(rounds + 1):
        runner.reset()
        stats = []
        runner.generate(prompt, config, stats_callback=stats.append)
        s = stats[-1]
        ours.append((s.num_generated_tokens * 1000 / max(1, s.inference_end_ms - s.prompt_eval_end_ms),
                     s.first_token_ms - s.inference_start_ms, s.num_prompt_tokens, s.num_generated_tokens))
    ours = ours[1:]
    graph = runner.decoder.method.cuda_graph
    print(f"pterun: prompt {ours[0][2]} tokens, generated {ours[0][3]}; decode graph replaying "
          f"{graph is not None and graph.replaying}")

    from transformers import CompileConfig

    model = hf_model().to("cuda")
    # transformers compiles the forward itself for a static cache (CUDA graphs, its own step marking).
    model.generation_config.cache_implementation = "static"
    model.generation_config.compile_config = CompileConfig(fullgraph=True, mode="reduce-overhead")
    from tokenizers import Tokenizer

    ids = torch.tensor([Tokenizer.from_file(str(tokenizer)).encode(prompt, add_special_tokens=False).ids],
                       device="cuda")
    theirs = []
    for _ in range(rounds + 2):
        torch.cuda.synchronize()
        start = time.perf_counter()
        first = model.generate(ids, max_new_tokens=1, do_sample=False)
        torch.cuda.synchronize()
        ttft = time.perf_counter() - start
        start = time.perf_counter()
        out = model.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
        torch.cuda.synchronize()
        whole = time.perf_counter() - start
        generated = out.shape[1] - ids.shape[1]
        theirs.append(((generated - 1) / max(whole - ttft, 1e-9), ttft * 1000))
        del first
    theirs = theirs[2:]

    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    bandwidth = copy_bandwidth()
    floor = weights / bandwidth
    ours_rate, theirs_rate = statistics.median(r[0] for r in ours), statistics.median(r[0] for r in theirs)
    table = {
        "pterun_decode_tok_s": ours_rate, "pterun_ttft_ms": statistics.median(r[1] for r in ours),
        "transformers_decode_tok_s": theirs_rate, "transformers_ttft_ms": statistics.median(r[1] for r in theirs),
        "weights_mib": weights / 2**20, "copy_bandwidth_gb_s": bandwidth / 1e9,
        "floor_ms_per_token": floor * 1000, "pterun_ms_per_token": 1000 / ours_rate,
        "pterun_over_floor": (1 / ours_rate) / floor, "pterun_over_transformers": ours_rate / theirs_rate,
    }
    print(json.dumps(table, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=["export", "run"])
    parser.add_argument("--out", type=Path, default=ROOT / ".cache" / "bench" / "llm")
    parser.add_argument("--dir", type=Path, default=ROOT / ".cache" / "bench" / "llm")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--tiny", action="store_true", help="export: the same program, a few thousand weights")
    args = parser.parse_args()
    if args.what == "export":
        path = export(args.out, TINY if args.tiny else PARAMS)
        print(f"wrote {path} ({path.stat().st_size / 2**20:.1f} MiB)")
    else:
        run(args.dir, args.new_tokens, args.rounds)


if __name__ == "__main__":
    main()
