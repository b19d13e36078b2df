"""The benchmark set: models nobody here wrote, built from small configs with random weights.

Each entry builds ``(module, inputs)``. The same builders run on the machine
that exports (with ExecuTorch) and on the GPU machine (eager and
``torch.compile`` references), so every way runs the same architecture.

Weights are drawn from a 16-value codebook scaled like the model's own
initialization: the programs then compress about eightfold for transport
to the GPU machine, and timings do not depend on weight values (no zeros,
no denormals).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

SET: dict[str, Callable[[], tuple[torch.nn.Module, tuple]]] = {}
CPU_SET = ("tiny_mlp", "llama", "bert", "vit", "mobilenet_v2", "resnet18", "example_llama")
GPU_SET = ("tiny_mlp", "llama", "mobilenet_v2", "bert", "vit", "resnet18", "swiglu_bf16")
# Realistic sizes, next to the small configs above: what a user's model costs, not just its shape.
REAL_SET = ("mobilenet_v2", "resnet50", "bert_base", "llama100m", "llama100m_decode")
# Entries that run another entry's program with other inputs (the file is exported once).
SAME_PROGRAM = {"llama100m_decode": "llama100m"}
# Quantized variants exported next to the float ones: how each model is quantized for XNNPACK.
QUANTIZED = {
    "mobilenet_v2": ("int8",), "resnet50": ("int8",), "resnet18": ("int8",),
    "bert_base": ("int8-dynamic",), "llama100m": ("int8-dynamic", "8da4w"),
}
# Dynamic dimensions of an entry's inputs, for torch.export (entries not listed are static).
DYNAMIC: dict[str, Callable[[], tuple]] = {}


def entry(fn):
    SET[fn.__name__] = fn
    return fn


def codebook(module: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    generator = torch.Generator().manual_seed(seed)
    levels = torch.linspace(-1.0, 1.0, 16)
    with torch.no_grad():
        # Parameters only: buffers hold statistics (a batch norm's variance must stay positive).
        for tensor in module.parameters():
            if not tensor.is_floating_point() or tensor.numel() < 2:
                continue
            scale = tensor.float().std().clamp_min(1e-3).item()
            picks = torch.randint(0, 16, tensor.shape, generator=generator)
            tensor.copy_((levels[picks] * scale * 1.7).to(tensor.dtype))
    return module.eval()


class _Logits(torch.nn.Module):
    def __init__(self, model: torch.nn.Module, key: str) -> None:
        super().__init__()
        self.model, self.key = model, key

    def forward(self, *args):
        return getattr(self.model(*args), self.key)


@entry
def tiny_mlp():
    """An MLP of three 256-wide layers on a batch of 8 (the smallest point of the set)."""
    torch.manual_seed(0)
    layers = torch.nn.Sequential(
        torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)
    )
    return codebook(layers), (torch.randn(8, 256),)


@entry
def llama():
    """transformers' Llama: 4 layers, hidden 512, SwiGLU 1376, 8 heads, a 128-token prompt."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=2048, hidden_size=512, intermediate_size=1376, num_hidden_layers=4,
                         num_attention_heads=8, num_key_value_heads=8, max_position_embeddings=256,
                         tie_word_embeddings=False)
    model = _Logits(LlamaForCausalLM(config), "logits")
    return codebook(model), (torch.randint(0, 2048, (1, 128)),)


@entry
def bert():
    """transformers' BERT encoder: 4 layers, hidden 256, 128 tokens."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(vocab_size=4096, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                        intermediate_size=1024, max_position_embeddings=256)
    return codebook(_Logits(BertModel(config), "last_hidden_state")), (torch.randint(0, 4096, (1, 128)),)


@entry
def vit():
    """transformers' ViT: 6 layers, hidden 192, a 224x224 image in 16x16 patches."""
    from transformers import ViTConfig, ViTModel

    torch.manual_seed(0)
    config = ViTConfig(hidden_size=192, num_hidden_layers=6, num_attention_heads=3, intermediate_size=768)
    return codebook(_Logits(ViTModel(config), "last_hidden_state")), (torch.randn(1, 3, 224, 224),)


@entry
def mobilenet_v2():
    """transformers' MobileNetV2 at its default width on one 224x224 image."""
    from transformers import MobileNetV2Config, MobileNetV2ForImageClassification

    torch.manual_seed(0)
    model = _Logits(MobileNetV2ForImageClassification(MobileNetV2Config()), "logits")
    return codebook(model), (torch.randn(1, 3, 224, 224),)


@entry
def resnet18():
    """transformers' ResNet with ResNet-18's basic blocks, one 224x224 image."""
    from transformers import ResNetConfig, ResNetForImageClassification

    torch.manual_seed(0)
    config = ResNetConfig(layer_type="basic", depths=[2, 2, 2, 2], hidden_sizes=[64, 128, 256, 512])
    return codebook(_Logits(ResNetForImageClassification(config), "logits")), (torch.randn(1, 3, 224, 224),)


@entry
def example_llama():
    """The program pterun ships (scripts/make-example.py), on a full 64-token prompt."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=1024, hidden_size=128, intermediate_size=352, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         tie_word_embeddings=False)
    return codebook(_Logits(LlamaForCausalLM(config), "logits")), (torch.randint(0, 1024, (1, 64)),)


@entry
def resnet50():
    """transformers' ResNet at its default config (ResNet-50's bottleneck blocks), one 224x224 image."""
    from transformers import ResNetConfig, ResNetForImageClassification

    torch.manual_seed(0)
    return codebook(_Logits(ResNetForImageClassification(ResNetConfig()), "logits")), (torch.randn(1, 3, 224, 224),)


@entry
def bert_base():
    """transformers' BERT at BERT-base's config (12 layers, hidden 768, 110M parameters), 128 tokens."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    return codebook(_Logits(BertModel(BertConfig()), "last_hidden_state")), (torch.randint(0, 30522, (1, 128)),)


LLAMA100M_CONTEXT = 512


class _KVStep(torch.nn.Module):
    """(tokens, start position) -> logits of ExecuTorch's example Llama; the KV cache is in its buffers."""

    def __init__(self, transformer: torch.nn.Module) -> None:
        super().__init__()
        self.transformer = transformer

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        return self.transformer(tokens, {"input_pos": input_pos})


def _llama100m() -> torch.nn.Module:
    """ExecuTorch's example Llama (the architecture its LLM export writes) at about 100M parameters:
    12 layers, dim 768, 12 heads sharing 4 KV heads, SwiGLU 2048, vocabulary 16384, a KV cache of 512
    positions and a dynamic prompt length, as `export_llama` exports it."""
    from executorch.examples.models.llama.llama_transformer import construct_transformer
    from executorch.examples.models.llama.model_args import ModelArgs

    torch.manual_seed(0)
    args = ModelArgs(dim=768, n_layers=12, n_heads=12, n_kv_heads=4, vocab_size=16384, hidden_dim=2048,
                     max_seq_len=LLAMA100M_CONTEXT, max_context_len=LLAMA100M_CONTEXT, max_batch_size=1,
                     use_kv_cache=True, enable_dynamic_shape=True)
    return codebook(_KVStep(construct_transformer(args)))


@entry
def llama100m():
    """The 100M Llama prefilling a 128-token prompt at position 0."""
    return _llama100m(), (torch.randint(0, 16384, (1, 128)), torch.tensor([0]))


@entry
def llama100m_decode():
    """The 100M Llama decoding one token at position 128 (same program as llama100m)."""
    return _llama100m(), (torch.randint(0, 16384, (1, 1)), torch.tensor([128]))


def _llama100m_dynamic() -> tuple:
    return ({1: torch.export.Dim("tokens", min=1, max=LLAMA100M_CONTEXT - 1)}, None)


DYNAMIC["llama100m"] = _llama100m_dynamic


class SwiGLU(torch.nn.Module):
    """down(silu(gate(x)) * up(x)), weights passed in (they are 270 MB, too much to ship in a program)."""

    def forward(self, x, w_gate, w_up, w_down):
        gate = torch.nn.functional.linear(x, w_gate)
        up = torch.nn.functional.linear(x, w_up)
        return torch.nn.functional.linear(torch.nn.functional.silu(gate) * up, w_down)


@entry
def swiglu_bf16():
    """A Llama-7B-sized SwiGLU MLP, 4096 -> 11008 -> 4096, bf16, one token: bound by reading its weights."""
    generator = torch.Generator().manual_seed(0)

    def weight(*shape):
        return (torch.randn(*shape, generator=generator) * 0.02).to(torch.bfloat16)

    x = torch.randn(1, 4096, generator=generator).to(torch.bfloat16)
    return SwiGLU(), (x, weight(11008, 4096), weight(11008, 4096), weight(4096, 11008))
