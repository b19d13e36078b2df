"""Exports programs with ExecuTorch's own CUDA backend (CudaPartitioner + CudaBackend), for the GPU suite.

ExecuTorch's CUDA backend compiles each delegated subgraph with AOTInductor for the GPU it runs on, so
these programs are made on the CUDA machine that tests them (tests/gpu/test_et_cuda.py), from
ExecuTorch's wheels installed into a folder (the machine needs no package index):

    python3 -m pip install -q --no-index --no-deps --target /tmp/site fixtures/gpu/export-wheels/*.whl
    PYTHONPATH=src:.:/tmp/site python3 scripts/export-et-cuda.py [OUT] [NAME ...]
    python scripts/export-et-cuda.py --check     # anywhere: build and trace each model, export nothing

scripts/make-gpu-fixtures.py downloads those wheels (ExecuTorch 1.5.1 and what its CUDA export imports).
OUT defaults to fixtures/gpu/et_cuda. Each program gets a folder of its own (ExecuTorch names the
weights file aoti_cuda_blob.ptd for every program) holding:

    program.pte, aoti_cuda_blob.ptd   the export
    calls.pt      a list of input lists, called in order on one method
    eager.pt      eager PyTorch's outputs for them, on the GPU under PyTorch's default flags
    info.json     what the program is: its dtype, where its outputs live; for the decoders, a prompt and
                  the tokens eager PyTorch picks after it, greedily (with tokenizer.json beside them)

The programs export in parallel processes (most of the time is AOTInductor compiling host code and
tuning kernels), with ExecuTorch's default CUDA options (max_autotune on, Triton SDPA), each with the
recipe a user of that kind of model follows:

    mlp, mlp_bf16    two linear layers and a ReLU, in float32 and bfloat16
    conv             a convolution, GELU and a mean
    attention        scaled_dot_product_attention (ExecuTorch lowers it to its Triton SDPA; bfloat16)
    dynamic          the MLP over a dynamic number of rows (1 to 16)
    mixed            a CudaBackend delegate followed by a portable operator on the CPU (cumsum)
    resident         the MLP with its inputs and outputs on the device (no copies; outputs unplanned)
    decoder          transformers' Llama with a static KV cache (its ExecuTorch integration), bfloat16,
                     with the metadata methods optimum-executorch writes
    decoder_int4     the same with torchao's int4 weights (tile-packed, the tinygemm kernel)
"""

from __future__ import annotations

import concurrent.futures
import json
import multiprocessing
import os
import shutil
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
BOS_ID, EOS_ID, VOCAB, CONTEXT = 1, 2, 512, 64  # tests/support/llm_tokenizers.py's tokenizer
PROMPT = "The river runs"  # what the GPU suite generates from with the decoders
GREEDY_TOKENS = 8


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(64, 128), torch.nn.Linear(128, 32)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


class Conv(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c = torch.nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x):
        return torch.nn.functional.gelu(self.c(x)).mean(dim=(2, 3))


class Attention(torch.nn.Module):
    def __init__(self, width: int = 128, heads: int = 4):
        super().__init__()
        self.heads = heads
        self.qkv, self.out = torch.nn.Linear(width, 3 * width), torch.nn.Linear(width, width)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(b, s, d))


class Mixed(torch.nn.Module):
    """A linear layer on the GPU, then a running sum the partitioner leaves to the portable CPU kernels."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(32, 16)

    def forward(self, x):
        return torch.cumsum(self.lin(x), dim=-1)


@dataclass
class Case:
    module: torch.nn.Module
    calls: list  # input lists; the first is the export's example
    dynamic_shapes: object = None
    config: dict = field(default_factory=dict)  # ExecutorchBackendConfig arguments
    metadata: dict | None = None  # constant methods
    cpu_ops: tuple[str, ...] = ()  # operators the partitioner leaves to the CPU
    info: dict = field(default_factory=dict)


def _randn(seed: int, *shape, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _move(module: torch.nn.Module, device: str) -> None:
    """``module.to(device)`` one leaf at a time, as ExecuTorch's recipe moves int4 weights (torchao's tensor
    subclasses cannot be swapped in by a parent module's ``to``)."""
    for sub in module.modules():
        if next(sub.parameters(recurse=False), None) is not None or next(sub.buffers(recurse=False), None) is not None:
            sub.to(device)


def _decoder(int4: bool, device: str) -> Case:
    """On ``device``: the static cache is made where the model is, and int4 weights cannot move once packed."""
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM
    from transformers.integrations.executorch import TorchExportableModuleWithStaticCache

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=CONTEXT,
                         bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=0, tie_word_embeddings=False,
                         attn_implementation="sdpa")
    model = LlamaForCausalLM(config).eval().requires_grad_(False).to(torch.bfloat16)
    if int4:
        # ExecuTorch's CUDA recipe (examples/models/qwen3_5_moe/export.py): 4-bit weights in groups of 32,
        # tile-packed for the tinygemm kernel on the GPU, then the model back on the CPU to export.
        from executorch.extension.llm.export.quantize import quantize_model_

        model.model.cuda()
        quantize_model_(model.model, qlinear_config="4w", qlinear_group_size=32,
                        qlinear_packing_format="tile_packed_to_4d")
    _move(model, device)
    model.generation_config = GenerationConfig(use_cache=True, cache_implementation="static",
                                               cache_config={"batch_size": 1, "max_cache_len": CONTEXT})

    class Decoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = TorchExportableModuleWithStaticCache(model, batch_size=1, max_cache_len=CONTEXT)

        def forward(self, input_ids, cache_position):
            return self.inner(input_ids=input_ids, cache_position=cache_position)

    prompt = torch.tensor([[BOS_ID, 5, 6, 7]])
    seq = torch.export.Dim("seq_length", min=1, max=CONTEXT - 1)
    calls = [[prompt, torch.arange(4)], [torch.tensor([[9]]), torch.tensor([4])],
             [torch.tensor([[11]]), torch.tensor([5])]]
    metadata = {"get_max_seq_len": CONTEXT, "get_max_context_len": CONTEXT, "get_vocab_size": VOCAB,
                "get_bos_id": BOS_ID, "get_eos_ids": [EOS_ID], "use_kv_cache": True, "use_sdpa_with_kv_cache": False,
                "enable_dynamic_shape": True}
    return Case(Decoder().eval(), calls, dynamic_shapes=({1: seq}, {0: seq}), metadata=metadata,
                info={"llm": True, "stateful": True})


def case(name: str, device: str = "cpu") -> Case:
    """The program ``name`` as exported (on the CPU) or as eager PyTorch runs it (``device="cuda"``)."""
    from pterun.export import device_resident_options

    torch.manual_seed(0)
    if name == "mlp":
        return Case(MLP(), [[_randn(s, 4, 64)] for s in range(3)])
    if name == "mlp_bf16":
        return Case(MLP().to(torch.bfloat16), [[_randn(s, 4, 64, dtype=torch.bfloat16)] for s in range(3)])
    if name == "conv":
        return Case(Conv(), [[_randn(s, 1, 3, 16, 16)] for s in range(3)])
    if name == "attention":
        return Case(Attention().to(torch.bfloat16), [[_randn(s, 2, 16, 128, dtype=torch.bfloat16)] for s in range(3)])
    if name == "dynamic":
        rows = torch.export.Dim("rows", min=1, max=16)
        return Case(MLP(), [[_randn(s, n, 64)] for s, n in ((0, 4), (1, 1), (2, 9), (3, 16))],
                    dynamic_shapes=({0: rows},))
    if name == "mixed":
        return Case(Mixed(), [[_randn(s, 4, 32)] for s in range(3)], cpu_ops=("cumsum",))
    if name == "resident":
        return Case(MLP(), [[_randn(s, 4, 64)] for s in range(3)], config=device_resident_options(),
                    info={"resident": True})
    if name == "decoder":
        return _decoder(False, device)
    if name == "decoder_int4":
        return _decoder(True, device)
    raise ValueError(f"no program named {name!r}; programs: {', '.join(NAMES)}")


NAMES = ("mlp", "mlp_bf16", "conv", "attention", "dynamic", "mixed", "resident", "decoder", "decoder_int4")


def partitioner(cpu_ops: tuple[str, ...]):
    from executorch.backends.cuda.cuda_backend import CudaBackend
    from executorch.backends.cuda.cuda_partitioner import CudaPartitioner

    specs = [CudaBackend.generate_method_name_compile_spec("forward")]
    if not cpu_ops:
        return CudaPartitioner(specs)

    class LeavesSomeOnTheCpu(CudaPartitioner):
        """ExecuTorch's partitioner, with the operators named left out of the delegate (they come last in
        the graph, so what is delegated stays one convex piece)."""

        def partition(self, exported_program):
            result = super().partition(exported_program)
            for node in result.tagged_exported_program.graph.nodes:
                if node.op == "call_function" and any(op in str(node.target) for op in cpu_ops):
                    node.meta.pop("delegation_tag", None)
            return result

    return LeavesSomeOnTheCpu(specs)


def export(name: str, out: Path) -> dict:
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")  # many exports run at once
    from executorch.exir import EdgeCompileConfig, ExecutorchBackendConfig, to_edge_transform_and_lower

    start = time.perf_counter()
    c = case(name)
    folder = out / name
    folder.mkdir(parents=True, exist_ok=True)
    example = tuple(c.calls[0])
    ep = torch.export.export(c.module, example, dynamic_shapes=c.dynamic_shapes, strict=True)
    edge = to_edge_transform_and_lower(ep, partitioner=[partitioner(c.cpu_ops)],
                                       compile_config=EdgeCompileConfig(_check_ir_validity=False),
                                       constant_methods=c.metadata)
    program = edge.to_executorch(ExecutorchBackendConfig(**c.config))
    (folder / "program.pte").write_bytes(program.buffer)
    program.write_tensor_data_to_file(str(folder))
    exported_s = time.perf_counter() - start
    # Eager PyTorch on the GPU, under PyTorch's default flags (cuDNN may use TF32), call after call.
    module = case(name, "cuda").module
    _move(module, "cuda")
    with torch.no_grad():
        eager = [_cpu(module(*[a.cuda() for a in call])) for call in c.calls]
    info = dict(c.info, name=name, dtype=str(next(c.module.parameters()).dtype).removeprefix("torch."),
                delegates=[d.id for d in program.executorch_program.execution_plan[0].delegates],
                export_s=round(exported_s, 1))
    if c.info.get("llm"):
        shutil.copy(_tokenizer(), folder / "tokenizer.json")
        info["prompt"], info["greedy"] = PROMPT, _greedy(name)
    torch.save(c.calls, folder / "calls.pt")
    torch.save(eager, folder / "eager.pt")
    (folder / "info.json").write_text(json.dumps(info, indent=1))
    return info


def _greedy(name: str) -> list[int]:
    """The tokens eager PyTorch picks after the prompt, greedily (the decoder's cache starts empty)."""
    from pterun.llm.tokenizer import Tokenizer

    tokenizer = Tokenizer(_tokenizer())
    prompt = tokenizer.encode(PROMPT, 1, 0)  # as the runner encodes it with num_bos=1
    module = case(name, "cuda").module
    _move(module, "cuda")
    tokens, position = prompt, 0
    chosen = []
    with torch.no_grad():
        for _ in range(GREEDY_TOKENS):
            ids = torch.tensor([tokens], device="cuda")
            logits = module(ids, torch.arange(position, position + len(tokens), device="cuda"))
            position += len(tokens)
            tokens = [int(logits[0, -1].float().argmax())]
            chosen.append(tokens[0])
    return chosen


def _tokenizer() -> str:
    """tests/support/llm_tokenizers.py's tokenizer.json, as scripts/make-gpu-fixtures.py wrote it."""
    return os.environ.get("PTERUN_TOKENIZER",
                          str(ROOT / "fixtures" / "gpu" / "llm" / "transformers-static-cache" / "tokenizer.json"))


def _cpu(value):
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    return [_cpu(v) for v in value]


def _export_logged(name: str, out: str) -> tuple[str, dict | None, str]:
    log = Path(out) / f"{name}.log"
    with open(log, "w") as stream:
        os.dup2(stream.fileno(), 1)
        os.dup2(stream.fileno(), 2)
        try:
            return name, export(name, Path(out)), ""
        except Exception:  # noqa: BLE001 - one program failing leaves the others
            return name, None, traceback.format_exc()


def check() -> None:
    """What of the export needs no GPU: each model built, traced by torch.export and run eagerly on the CPU (the
    test suite runs this, so that the programs cannot stop exporting unseen); int4 weights need a GPU to pack."""
    for name in NAMES:
        if name == "decoder_int4" and not torch.cuda.is_available():
            print(f"{name}: not checked (torchao packs int4 weights on a GPU)")
            continue
        c = case(name)
        torch.export.export(c.module, tuple(c.calls[0]), dynamic_shapes=c.dynamic_shapes, strict=True)
        with torch.no_grad():
            for call in c.calls:
                c.module(*call)
        print(f"{name}: traced, {len(c.calls)} calls run")


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description="Exports programs with ExecuTorch's CUDA backend (see the docstring).")
    parser.add_argument("out", nargs="?", type=Path, default=ROOT / "fixtures" / "gpu" / "et_cuda")
    parser.add_argument("names", nargs="*", help=f"programs to export (all by default): {', '.join(NAMES)}")
    parser.add_argument("--check", action="store_true", help="export nothing: build and trace each model")
    args = parser.parse_args()
    if args.check:
        check()
        return
    out, names = args.out, args.names or list(NAMES)
    unknown = sorted(set(names) - set(NAMES))
    if unknown:
        parser.error(f"no program named {', '.join(unknown)}; programs: {', '.join(NAMES)}")
    out.mkdir(parents=True, exist_ok=True)
    workers = min(len(names), max(1, (os.cpu_count() or 2) // 2))
    start = time.perf_counter()
    failed = []
    with concurrent.futures.ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        for name, info, error in pool.map(_export_logged, names, [str(out)] * len(names)):
            if info is None:
                failed.append(name)
                print(f"{name}: FAILED\n{error}", flush=True)
            else:
                print(f"{name}: {info['export_s']} s, delegates {info['delegates']}, {info['dtype']}", flush=True)
    print(f"exported {len(names) - len(failed)} of {len(names)} programs in {time.perf_counter() - start:.0f} s "
          f"into {out}")
    if failed:
        raise SystemExit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
