"""ExecuTorch's own example models (executorch.examples.models), some at smaller shapes than theirs."""

from __future__ import annotations

import importlib
from collections.abc import Callable

import torch

from tests.support.models.registry import VOCAB, Model, builder, randn, tokens


def _randn(*shapes: tuple[int, ...], dtype: torch.dtype = torch.float32) -> Callable[[int], tuple]:
    """Inputs of these shapes, each drawn from a seed of its own."""
    return lambda seed: tuple(randn(seed + i, *shape).to(dtype) for i, shape in enumerate(shapes))


def _example(where: str, name: str, inputs: Callable[[int], tuple]) -> Callable[[], Model]:
    def make() -> Model:
        return Model(getattr(importlib.import_module(f"executorch.examples.models.{where}"), name)(), inputs)

    return make


# name: (module of executorch.examples.models, class, inputs)
_PLAIN = {
    "et_toy_mul": ("toy_model", "MulModule", _randn((3, 2), (3, 2))),
    "et_toy_add": ("toy_model", "AddModule", _randn((1,), (1,))),
    "et_toy_add_mul": ("toy_model", "AddMulModule", _randn((2, 2), (2, 2), (2, 2))),
    "et_toy_softmax": ("toy_model", "SoftmaxModule", _randn((2, 5))),
    "et_toy_conv1d": ("toy_model", "Conv1dModule", _randn((1, 3, 10))),
    "et_toy_linear": ("toy_model", "LinearModule", _randn((3, 3))),
    # The SDPA example in float32 and a smaller shape than the example's (2, 8, 128, 64) bf16 ...
    "et_toy_sdpa": ("toy_model", "SdpaModule", _randn((1, 4, 16, 8), (1, 4, 16, 8), (1, 4, 16, 8))),
    # ... and in its own dtype, bfloat16, at a smaller shape.
    "et_toy_sdpa_bf16": ("toy_model", "SdpaModule", _randn((1, 2, 8, 8), (1, 2, 8, 8), (1, 2, 8, 8),
                                                           dtype=torch.bfloat16)),
    "et_deep_autoencoder": ("mlperf_tiny", "DeepAutoEncoder", _randn((1, 640))),
    "et_ds_cnn": ("mlperf_tiny", "DSCNNKWS", _randn((1, 1, 49, 10))),
    "et_mobilenet_v1_025": ("mlperf_tiny", "MobileNetV1025", _randn((1, 3, 96, 96))),
    "et_resnet8": ("mlperf_tiny", "ResNet8", _randn((1, 3, 32, 32))),
}
for _name, _made in _PLAIN.items():
    builder(_name)(_example(*_made))


@builder("et_lstm")
def et_lstm() -> Model:
    """The LSTM example (torch.nn.quantizable's LSTM, 2 layers), with its initial state."""
    from executorch.examples.models.lstm import LSTMModel

    return Model(
        LSTMModel().get_eager_model(),
        lambda seed: (randn(seed, 5, 3, 10), (randn(seed + 1, 2, 3, 20), randn(seed + 2, 2, 3, 20))),
    )


def llama_args(**overrides):
    from executorch.examples.models.llama.model_args import ModelArgs

    args = dict(
        dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=VOCAB, hidden_dim=128, max_seq_len=32,
        max_context_len=32, max_batch_size=1, norm_eps=1e-5,
    )
    args.update(overrides)
    return ModelArgs(**args)


def llama_transformer(**overrides) -> torch.nn.Module:
    from executorch.examples.models.llama.llama_transformer import construct_transformer

    return construct_transformer(llama_args(**overrides))


@builder("et_llama")
def et_llama() -> Model:
    """ExecuTorch's Llama example transformer (no KV cache), logits of the last token."""
    return Model(llama_transformer(), lambda seed: (tokens(seed, VOCAB, 1, 10),))


class KVStep(torch.nn.Module):
    """One decoding step of a KV-cached transformer: (tokens, position) -> logits; the caches are buffers."""

    def __init__(self, transformer: torch.nn.Module) -> None:
        super().__init__()
        self.transformer = transformer

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        return self.transformer(tokens, {"input_pos": input_pos})


@builder("et_llama_kv")
def et_llama_kv() -> Model:
    """ExecuTorch's Llama example with its KV cache (mutable buffers updated by index_put each step)."""
    return Model(
        KVStep(llama_transformer(use_kv_cache=True, enable_dynamic_shape=False)),
        lambda seed: (tokens(seed, VOCAB, 1, 1), torch.tensor([seed], dtype=torch.long)),
    )
