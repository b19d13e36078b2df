"""Small language-model programs made by ExecuTorch's LLM export, and a tokenizer for them.

Everything is built from what the repository ships: the tokenizers come from
tests/support/llm_tokenizers.py, the models have small configs and seeded
random weights. Each program is exported once into the program cache
(``$PTERUN_PROGRAM_CACHE`` or the run's temporary directory, as
tests/support/exporting.py keeps it) and reused after.

- ``llama_program(variant)``: ExecuTorch's example Llama through
  ``export_llama`` (its Python entry point, the same path as the CLI) with
  ``use_kv_cache`` and ``use_sdpa_with_kv_cache``: "dynamic" takes a prompt of
  up to ``get_max_seq_len() - 1`` tokens per call, "static" one token per call,
  "dynamic-bf16" computes in bfloat16, "no-kv-cache" takes the whole sequence
  each call (no cache, no position input), "xnnpack-8da4w" is the dynamic one
  lowered to XNNPACK with 8-bit dynamic activations and 4-bit grouped weights,
  "xnnpack-8da4w-ptd" keeps those weights in a .ptd file beside it,
  "xnnpack-8da4w-quantized-kv" adds export_llama's quantized KV cache
  (``custom_quantized_sdpa``) to the 8da4w layers, and
  "vulkan-8da4w" is ExecuTorch's Vulkan/WebGPU LLM recipe (``-d fp32 --vulkan
  -qmode 8da4w``): one VulkanBackend delegate, 4-bit grouped weights, 8-bit
  activations quantized per token, attention over a KV cache it keeps.
  ``eos_ids`` replaces the one EOS id in ``get_eos_ids``. The programs take up
  to 31 tokens a call (``get_max_seq_len() - 1``) in a context of 64 positions.
  ExecuTorch's runner takes a program whose ``max_seq_len`` is below its
  context for a sliding-window one and does not stop generating at the end of
  the context; ``max_seq_len=MAX_CONTEXT_LEN`` makes one that it stops. The
  program without a KV cache takes the whole sequence each call, so its
  ``max_seq_len`` is the context.
- ``llama_greedy_reference(variant, prompt, n)``: that model run eagerly in PyTorch after the exporter's
  source transforms (quantization included), before export: greedy tokens and each call's logits.
- ``transformers_program()``: transformers' LlamaForCausalLM wrapped in its
  ExecuTorch integration's ``TorchExportableModuleWithStaticCache`` (inputs
  ``input_ids`` and ``cache_position``), with the metadata methods
  optimum-executorch writes; ``transformers_program("qwen2-8da4w")`` is a
  Qwen2 decoder (q, k and v projections with biases) whose linear layers are
  quantized as optimum-executorch quantizes them (torchao's
  ``Int8DynamicActivationIntxWeightConfig``, 4-bit weights in groups of 32),
  lowered to XNNPACK; ``"smollm3-8da4w"`` is SmolLM3 (no biases, rotary
  embeddings left out of every fourth layer) quantized and lowered alike.

``export_llama`` runs in a subprocess. It changes no torch setting (threads,
default dtype, grad mode, dynamo, inductor and export configs stay as they
were), but on its way it binds ExecuTorch's quantization patterns to
operators: ``quantized_decomposed::add`` (and its relatives) gain a
``CompositeImplicitAutograd`` kernel, after which every later export in the
process decomposes a call to them into dequantize, add and quantize
(tests/kernels/test_quantized_programs.py then finds no quantized add to
test). A fresh interpreter costs a few seconds per export, once per cache.
The weights are drawn from a fixed seed inside ``fork_rng`` and handed to the
exporter as a checkpoint, as a user hands real ones.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from tests.support.exporting import locked, publish, scratch
from tests.support.llm_tokenizers import BOS_ID, EOS_ID, VOCAB, tokenizer_path

MAX_SEQ_LEN = 32  # longest prefill chunk the runner feeds (the dynamic programs take one less)
MAX_CONTEXT_LEN = 64
LLAMA_VARIANTS = ("dynamic", "static", "dynamic-bf16", "no-kv-cache", "xnnpack-8da4w", "xnnpack-8da4w-ptd",
                  "xnnpack-8da4w-quantized-kv", "vulkan-8da4w")
_VERSION = "v1"  # bump to re-export the programs after a recipe change


@dataclass(frozen=True)
class LlmProgram:
    pte: Path
    tokenizer: Path
    metadata: dict  # the constant methods the exporter wrote
    # "input_pos" (a start position), "cache_position" (one position per token), or None (no KV cache)
    position_input: str | None
    data: Path | None = None  # the .ptd file holding the weights, when the program keeps them outside

    @property
    def dynamic(self) -> bool:
        return bool(self.metadata.get("enable_dynamic_shape"))


def llama_args(**overrides) -> dict:
    """params.json of the tiny example Llama (grouped-query attention, SwiGLU)."""
    return dict(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=VOCAB, hidden_dim=128, norm_eps=1e-5,
                **overrides)


def llama_config(directory: Path, variant: str, params: dict, *, seed: int = 0,
                 max_seq_len: int = MAX_SEQ_LEN, max_context_len: int = MAX_CONTEXT_LEN,
                 eos_ids: tuple[int, ...] = (EOS_ID,), state_dict: dict | None = None):
    """``export_llama``'s LlmConfig for ``variant``, with ``params`` and seeded random weights (or
    ``state_dict``): params.json written into ``directory``, the checkpoint into a directory of its own
    (``_checkpoint_directory``), the way a user passes real ones."""
    from executorch.examples.models.llama.llama_transformer import construct_transformer
    from executorch.examples.models.llama.model_args import ModelArgs
    from executorch.extension.llm.export.config.llm_config import DtypeOverride, LlmConfig

    assert variant in LLAMA_VARIANTS, variant
    directory.mkdir(parents=True, exist_ok=True)
    if state_dict is None:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            args = ModelArgs(max_seq_len=max_seq_len, max_context_len=max_context_len, **params)
            state_dict = construct_transformer(args).state_dict()
    checkpoint = _checkpoint_directory() / "checkpoint.pth"
    torch.save(state_dict, checkpoint)
    (directory / "params.json").write_text(json.dumps(params))

    config = LlmConfig()
    config.base.params = str(directory / "params.json")
    config.base.checkpoint = str(checkpoint)
    config.base.metadata = json.dumps({"get_bos_id": BOS_ID, "get_eos_ids": list(eos_ids)})
    config.model.use_kv_cache = config.model.use_sdpa_with_kv_cache = variant != "no-kv-cache"
    config.model.enable_dynamic_shape = variant != "static"
    config.export.max_seq_length = max_seq_len
    config.export.max_context_length = max_context_len
    config.export.output_dir = str(directory)
    config.export.output_name = str(directory / "model.pte")
    if variant.endswith("-bf16"):
        config.model.dtype_override = DtypeOverride.bf16
    if variant.startswith("xnnpack-"):
        config.backend.xnnpack.enabled = True
    if variant.startswith("vulkan-"):
        config.backend.vulkan.enabled = True
    if "8da4w" in variant:
        config.quantization.qmode = "8da4w"
        config.quantization.group_size = 32
    if variant.endswith("-ptd"):
        config.export.foundation_weights_file = "model.ptd"
    if variant.endswith("-quantized-kv"):
        config.model.quantize_kv_cache = True
    return config


def _checkpoint_directory() -> Path:
    """A new directory whose path names no quantization: ExecuTorch's Llama takes a checkpoint whose path
    contains "int8" or "8da4w" for one quantized already (examples/models/llama/model.py) and converts the
    model for it first (groups of 256: a no-op below 256 input features, an export failure above), so a
    directory named for the variant, as the program cache's are, must not hold it."""
    markers = ("int8", "8da4w")
    assert not any(m in tempfile.gettempdir() for m in markers), tempfile.gettempdir()
    while True:
        directory = Path(tempfile.mkdtemp(prefix="llama-checkpoint-"))
        if not any(m in str(directory) for m in markers):
            return directory
        directory.rmdir()


def _drop_checkpoint(config) -> None:
    shutil.rmtree(Path(config.base.checkpoint).parent)  # the weights are in the program now


def export_llama_program(directory: Path, variant: str, params: dict, **options) -> Path:
    """Writes ``directory/model.pte`` with ``export_llama`` from ``llama_config(directory, variant, params,
    **options)``."""
    from executorch.examples.models.llama.export_llama_lib import export_llama

    config = llama_config(directory, variant, params, **options)
    try:
        written = Path(export_llama(config))
    finally:
        _drop_checkpoint(config)
    assert written == directory / "model.pte", written
    return written


def eager_llama_greedy(directory: Path, variant: str, params: dict, prompt: list[int], new_tokens: int,
                       **options) -> Path:
    """The model ``export_llama`` exports for ``variant``, run eagerly in PyTorch after its source transforms
    (quantization, the KV cache, SDPA), before export: the prompt in one call, then ``new_tokens`` greedy
    steps of one token. Writes ``directory/greedy.pt``: the tokens it chose and the logits of each call."""
    from executorch.examples.models.llama.export_llama_lib import _prepare_for_llama_export

    config = llama_config(directory, variant, params, **options)
    try:
        model = _prepare_for_llama_export(config).model.eval()
    finally:
        _drop_checkpoint(config)
    tokens, logits = list(prompt), []
    with torch.no_grad():
        step = torch.tensor([prompt])
        for _ in range(new_tokens):
            out = model(step, {"input_pos": torch.tensor([len(tokens) - step.shape[1]])})
            logits.append(out.reshape(-1, out.shape[-1])[-1].clone())
            tokens.append(int(logits[-1].argmax()))
            step = torch.tensor([[tokens[-1]]])
    torch.save({"tokens": tokens[len(prompt):], "logits": torch.stack(logits)}, directory / "greedy.pt")
    return directory / "greedy.pt"


def _export_apart(directory: Path, variant: str, params: dict, **options) -> None:
    """``export_llama_program`` in a fresh interpreter (see the module's docstring for why)."""
    _apart("export_llama_program", directory, variant, params, **options)


def _apart(function: str, directory: Path, variant: str, params: dict, **options) -> None:
    arguments = json.dumps({"directory": str(directory), "variant": variant, "params": params, **options})
    code = (f"import json, sys; from pathlib import Path; from tests.support.llm_programs import {function};"
            " a = json.loads(sys.argv[1]); a['directory'] = Path(a['directory']);"
            " a.update({'eos_ids': tuple(a['eos_ids'])} if 'eos_ids' in a else {}); " + function + "(**a)")
    done = subprocess.run([sys.executable, "-c", code, arguments], cwd=Path(__file__).parents[2],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode:
        raise RuntimeError(f"{function} of {variant!r} failed:\n{done.stderr[-4000:]}")


def _metadata(pte: Path) -> dict:
    # Read back what the exporter wrote rather than restating it, so a test compares against the program.
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(pte)
    names = [n for n in program.method_names if n.startswith(("get_", "use_", "enable_"))]
    values = {}
    for name in sorted(names):
        out = program.load_method(name).execute([])
        values[name] = [int(x) for x in out] if name.endswith("_ids") else out[0]
    return values


def _cached(key: str, export) -> Path:
    """``export(directory)`` once; an export cut short leaves nothing a later run would take for finished."""
    with locked(key) as directory:
        if not directory.exists():
            partial = scratch(directory)
            export(partial)
            publish(partial, directory)
        return directory / "model.pte"


def llama_program(variant: str, eos_ids: tuple[int, ...] = (EOS_ID,), *,
                  max_seq_len: int | None = None) -> LlmProgram:
    """``max_seq_len`` defaults to MAX_SEQ_LEN, or to the context for "no-kv-cache"."""
    if max_seq_len is None:
        max_seq_len = MAX_CONTEXT_LEN if variant == "no-kv-cache" else MAX_SEQ_LEN
    eos = "" if eos_ids == (EOS_ID,) else "-eos-" + hashlib.sha1(repr(eos_ids).encode()).hexdigest()[:8]
    pte = _cached(f"llm-llama-{variant}-seq{max_seq_len}{eos}-{_VERSION}", lambda d: _export_apart(
        d, variant, llama_args(), max_seq_len=max_seq_len, eos_ids=list(eos_ids)))
    data = pte.with_suffix(".ptd") if variant.endswith("-ptd") else None
    position = None if variant == "no-kv-cache" else "input_pos"
    return LlmProgram(pte, tokenizer_path(), _metadata(pte), position, data)


def llama_greedy_reference(variant: str, prompt: list[int], new_tokens: int) -> dict:
    """``eager_llama_greedy`` of ``llama_program(variant)``'s model (same weights, same recipe), cached:
    {"tokens": the greedy tokens after the prompt, "logits": [calls, vocab], each call's last logits}."""
    key = hashlib.sha1(json.dumps([prompt, new_tokens]).encode()).hexdigest()[:10]
    with locked(f"llm-llama-{variant}-eager-{key}-{_VERSION}") as directory:
        if not directory.exists():
            partial = scratch(directory)
            _apart("eager_llama_greedy", partial, variant, llama_args(), prompt=prompt, new_tokens=new_tokens)
            publish(partial, directory)
        return torch.load(directory / "greedy.pt")


class _StaticCacheDecoder(torch.nn.Module):
    """transformers' ExecuTorch wrapper, called positionally (its forward takes keywords only)."""

    def __init__(self, model, max_cache_len: int):
        from transformers.integrations.executorch import TorchExportableModuleWithStaticCache

        super().__init__()
        self.inner = TorchExportableModuleWithStaticCache(model, batch_size=1, max_cache_len=max_cache_len)

    def forward(self, input_ids: torch.Tensor, cache_position: torch.Tensor) -> torch.Tensor:
        return self.inner(input_ids=input_ids, cache_position=cache_position)


def export_transformers_program(directory: Path, *, seed: int = 0, max_cache_len: int = MAX_CONTEXT_LEN,
                                model_type: str = "llama") -> Path:
    from executorch.exir import to_edge_transform_and_lower
    from transformers import (
        GenerationConfig,
        LlamaConfig,
        LlamaForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
        SmolLM3Config,
        SmolLM3ForCausalLM,
    )

    torch.manual_seed(seed)
    shape = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=max_cache_len,
                 bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=0, tie_word_embeddings=False)
    if model_type == "qwen2-8da4w":
        model = Qwen2ForCausalLM(Qwen2Config(**shape)).eval().requires_grad_(False)
        quantize_8da4w_linears(model)
    elif model_type == "smollm3-8da4w":
        model = SmolLM3ForCausalLM(SmolLM3Config(**shape)).eval().requires_grad_(False)
        quantize_8da4w_linears(model)
    else:
        model = LlamaForCausalLM(LlamaConfig(**shape)).eval().requires_grad_(False)
    model.generation_config = GenerationConfig(use_cache=True, cache_implementation="static",
                                               cache_config={"batch_size": 1, "max_cache_len": max_cache_len})
    module = _StaticCacheDecoder(model, max_cache_len).eval()
    tokens = torch.tensor([[BOS_ID, 5, 6]])
    seq = torch.export.Dim("seq_length", min=1, max=max_cache_len)
    # Strict, as transformers exports it: non-strict tracing misses the cache writes, since the cache's
    # layers hold the buffers directly rather than through the module.
    exported = torch.export.export(module, (tokens, torch.arange(3)), dynamic_shapes=({1: seq}, {0: seq}),
                                   strict=True)
    metadata = {  # what optimum-executorch writes for a decoder
        "get_max_seq_len": max_cache_len, "get_max_context_len": max_cache_len, "get_vocab_size": VOCAB,
        "get_bos_id": BOS_ID, "get_eos_ids": [EOS_ID], "use_kv_cache": True, "use_sdpa_with_kv_cache": False,
        "enable_dynamic_shape": True,
    }
    partitioner = []
    if model_type.endswith("-8da4w"):
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        partitioner = [XnnpackPartitioner()]
    program = to_edge_transform_and_lower(exported, partitioner=partitioner, constant_methods=metadata).to_executorch()
    directory.mkdir(parents=True, exist_ok=True)
    pte = directory / "model.pte"
    pte.write_bytes(program.buffer)
    return pte


def bench_decoder_program() -> Path:
    """bench/llm_gpu.py's decoder at its tiny size: transformers' static-cache Llama in bfloat16, as the GPU
    bench exports it, with a few thousand weights (2 layers, width 64)."""
    return _cached(f"llm-bench-gpu-tiny-{_VERSION}", _export_bench_decoder)


def _export_bench_decoder(directory: Path) -> None:
    done = subprocess.run([sys.executable, "bench/llm_gpu.py", "export", "--size", "tiny", "--no-xz", "--out",
                           str(directory)], cwd=Path(__file__).parents[2], capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"bench/llm_gpu.py export --size tiny failed:\n{done.stderr[-4000:]}")
    (directory / "hf_llamatiny.bf16.pte").rename(directory / "model.pte")


def example_program() -> LlmProgram:
    """The language model that ships in the package (scripts/make-llm-example.py)."""
    from importlib import resources

    examples = Path(str(resources.files("pterun.examples")))
    pte = examples / "llm_tiny.pte"
    return LlmProgram(pte, examples / "llm_tiny.tokenizer.json", _metadata(pte), "input_pos")


def quantize_8da4w_linears(model: torch.nn.Module) -> None:
    """optimum-executorch's 8da4w recipe: 8-bit dynamic activations, 4-bit weights in groups of 32, linear
    layers only."""
    from torchao.quantization import quantize_
    from torchao.quantization.granularity import PerGroup
    from torchao.quantization.quant_api import Int8DynamicActivationIntxWeightConfig

    config = Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(32))
    quantize_(model, config, filter_fn=lambda module, _: isinstance(module, torch.nn.Linear))


def transformers_program(model_type: str = "llama") -> LlmProgram:
    """transformers' LlamaForCausalLM ("llama"), or its Qwen2 or SmolLM3 quantized as optimum-executorch does
    ("qwen2-8da4w", "smollm3-8da4w"), with a static cache."""
    key = "llm-transformers-static-cache" if model_type == "llama" else f"llm-transformers-{model_type}"
    pte = _cached(f"{key}-{_VERSION}", lambda d: export_transformers_program(d, model_type=model_type))
    return LlmProgram(pte, tokenizer_path(), _metadata(pte), "cache_position")
