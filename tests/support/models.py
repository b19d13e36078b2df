"""Real models for differential tests: small configs, random weights, no downloads.

Every builder returns a :class:`Model`: the module (in eval mode, weights
drawn under a fixed seed) and a function making inputs for a given seed, so a
test can export with one set of inputs and run with others. Models come from
libraries we did not write (transformers, ExecuTorch's own examples), shrunk to
a few hundred thousand parameters so each exports in seconds on two cores.

``MODELS`` maps a name to its builder; ``@builder(...)`` registers one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class Model:
    module: torch.nn.Module
    make_inputs: Callable[[int], tuple]  # seed -> inputs; seed 0 is what the program is exported with
    dynamic_shapes: Any = None

    @property
    def example_inputs(self) -> tuple:
        return self.make_inputs(0)


MODELS: dict[str, Callable[[], Model]] = {}


def builder(name: str):
    def register(fn: Callable[[], Model]) -> Callable[[], Model]:
        MODELS[name] = fn
        return fn

    return register


def build(name: str) -> Model:
    torch.manual_seed(0)
    model = MODELS[name]()
    model.module.eval()
    return model


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(1000 + seed)


def randn(seed: int, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=_gen(seed))


def tokens(seed: int, vocab: int, *shape: int) -> torch.Tensor:
    return torch.randint(0, vocab, shape, generator=_gen(seed))


class Field(torch.nn.Module):
    """Calls a transformers model and returns the named fields of its output (exportable: tensors only)."""

    def __init__(self, model: torch.nn.Module, *names: str, **kwargs: Any) -> None:
        super().__init__()
        self.model = model
        self.names = names
        self.kwargs = kwargs

    def forward(self, *args):
        out = self.model(*args, **self.kwargs)
        values = tuple(getattr(out, n) for n in self.names)
        return values[0] if len(values) == 1 else values


# -- transformers: language models ---------------------------------------------------------------

VOCAB = 128


@builder("llama")
def llama() -> Model:
    """Llama: RMSNorm, rotary embeddings, grouped-query attention, SwiGLU MLP."""
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=160,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        use_cache=False,
        attn_implementation="sdpa",
    )
    return Model(
        Field(transformers.LlamaForCausalLM(config), "logits", use_cache=False),
        lambda seed: (tokens(seed, VOCAB, 1, 12),),
    )


@builder("qwen3")
def qwen3() -> Model:
    """Qwen3: Llama-like with per-head RMSNorm on queries and keys, eager attention."""
    import transformers

    config = transformers.Qwen3Config(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=64,
        use_cache=False,
        attn_implementation="eager",
    )
    return Model(
        Field(transformers.Qwen3ForCausalLM(config), "logits", use_cache=False),
        lambda seed: (tokens(seed, VOCAB, 2, 9),),
    )


@builder("gpt2")
def gpt2() -> Model:
    """GPT-2: learned positions, LayerNorm, fused QKV (Conv1D), tanh GELU, tied embeddings."""
    import transformers

    config = transformers.GPT2Config(
        vocab_size=VOCAB,
        n_positions=32,
        n_embd=64,
        n_layer=2,
        n_head=4,
        use_cache=False,
        bos_token_id=1,
        eos_token_id=2,
        attn_implementation="eager",
    )
    return Model(
        Field(transformers.GPT2LMHeadModel(config), "logits", use_cache=False),
        lambda seed: (tokens(seed, VOCAB, 2, 10),),
    )


def _bert_inputs(seed: int) -> tuple:
    ids = tokens(seed, VOCAB, 2, 12)
    mask = torch.ones(2, 12, dtype=torch.long)
    mask[1, 8 + seed % 3 :] = 0  # padding in the second sequence
    types = torch.zeros(2, 12, dtype=torch.long)
    types[:, 6:] = 1
    return ids, mask, types


@builder("bert")
def bert() -> Model:
    """BERT encoder with a padding mask, token types and the pooler."""
    import transformers

    config = transformers.BertConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=32,
        type_vocab_size=2,
        attn_implementation="eager",
    )
    return Model(Field(transformers.BertModel(config), "last_hidden_state", "pooler_output"), _bert_inputs)


@builder("distilbert")
def distilbert() -> Model:
    """DistilBERT sequence classifier (sdpa attention with a padding mask)."""
    import transformers

    config = transformers.DistilBertConfig(
        vocab_size=VOCAB,
        dim=64,
        n_layers=2,
        n_heads=4,
        hidden_dim=128,
        max_position_embeddings=32,
        num_labels=3,
        attn_implementation="sdpa",
    )
    return Model(
        Field(transformers.DistilBertForSequenceClassification(config), "logits"),
        lambda seed: _bert_inputs(seed)[:2],
    )


@builder("t5")
def t5() -> Model:
    """T5 encoder-decoder: relative position buckets, RMS-style LayerNorm, gated GELU."""
    import transformers

    config = transformers.T5Config(
        vocab_size=VOCAB,
        d_model=64,
        d_kv=16,
        d_ff=128,
        num_layers=2,
        num_decoder_layers=2,
        num_heads=4,
        relative_attention_num_buckets=8,
        relative_attention_max_distance=16,
        feed_forward_proj="gated-gelu",
        use_cache=False,
        decoder_start_token_id=0,
        pad_token_id=0,
    )
    return Model(
        _Seq2Seq(transformers.T5ForConditionalGeneration(config)),
        lambda seed: (tokens(seed, VOCAB, 1, 10), tokens(seed + 7, VOCAB, 1, 6)),
    )


class _Seq2Seq(torch.nn.Module):
    """(encoder ids, decoder ids) -> logits; the model's second positional argument is the mask."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, decoder_input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, decoder_input_ids=decoder_input_ids, use_cache=False).logits


@builder("deberta_v2")
def deberta_v2() -> Model:
    """DeBERTa-v2: disentangled attention with log-bucketed relative positions gathered per query."""
    import transformers

    config = transformers.DebertaV2Config(
        vocab_size=VOCAB,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=32,
        relative_attention=True,
        position_buckets=8,
        pos_att_type=["p2c", "c2p"],
    )
    return Model(
        Field(transformers.DebertaV2Model(config), "last_hidden_state"),
        lambda seed: (tokens(seed, VOCAB, 1, 12),),
    )


@builder("mamba")
def mamba() -> Model:
    """Mamba: causal depthwise conv1d and the selective state-space scan (unrolled over the sequence)."""
    import transformers

    config = transformers.MambaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        state_size=8,
        num_hidden_layers=2,
        expand=2,
        conv_kernel=4,
        use_cache=False,
    )
    return Model(
        Field(transformers.MambaForCausalLM(config), "logits", use_cache=False),
        lambda seed: (tokens(seed, VOCAB, 1, 6),),
    )


@builder("clip")
def clip() -> Model:
    """CLIP: a text and an image tower, pooled at each text's end token, and their scaled similarities."""
    import transformers

    config = transformers.CLIPConfig(
        text_config=dict(
            vocab_size=VOCAB,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            max_position_embeddings=16,
            bos_token_id=1,
            eos_token_id=2,
        ),
        vision_config=dict(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            image_size=32,
            patch_size=8,
        ),
        projection_dim=16,
    )

    def inputs(seed: int) -> tuple:
        ids = tokens(seed, VOCAB - 3, 2, 8) + 3  # no end token (2) but the ones placed below
        ids[0, 5 - seed % 3] = 2
        ids[1, 7] = 2
        return ids, randn(seed, 3, 3, 32, 32)

    return Model(Field(transformers.CLIPModel(config), "logits_per_image", "logits_per_text"), inputs)


# -- transformers: vision and audio --------------------------------------------------------------


def _images(size: int, batch: int = 1) -> Callable[[int], tuple]:
    return lambda seed: (randn(seed, batch, 3, size, size),)


@builder("vit")
def vit() -> Model:
    """ViT image classifier: patch embedding conv, CLS token, pre-norm encoder."""
    import transformers

    config = transformers.ViTConfig(
        image_size=32,
        patch_size=8,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        num_labels=10,
        attn_implementation="sdpa",
    )
    return Model(Field(transformers.ViTForImageClassification(config), "logits"), _images(32))


@builder("dinov2")
def dinov2() -> Model:
    """DINOv2 on images larger than its config's: bicubic position-embedding interpolation, layer scale."""
    import transformers

    config = transformers.Dinov2Config(
        image_size=32,
        patch_size=8,
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        mlp_ratio=2,
        attn_implementation="sdpa",
    )
    return Model(Field(transformers.Dinov2Model(config), "last_hidden_state", "pooler_output"), _images(48))


@builder("mobilenet_v2")
def mobilenet_v2() -> Model:
    """MobileNetV2: inverted residuals, depthwise convs, ReLU6, batch norm (folded into eval)."""
    import transformers

    config = transformers.MobileNetV2Config(
        image_size=64,
        depth_multiplier=0.35,
        num_labels=10,
        tf_padding=True,
    )
    return Model(Field(transformers.MobileNetV2ForImageClassification(config), "logits"), _images(64))


@builder("resnet")
def resnet() -> Model:
    """ResNet with bottleneck blocks, max pooling and adaptive average pooling."""
    import transformers

    config = transformers.ResNetConfig(
        embedding_size=16,
        hidden_sizes=[16, 32, 64, 96],
        depths=[1, 1, 2, 1],
        layer_type="bottleneck",
        num_labels=10,
        downsample_in_bottleneck=True,
    )
    return Model(Field(transformers.ResNetForImageClassification(config), "logits"), _images(48, batch=2))


@builder("convnext")
def convnext() -> Model:
    """ConvNeXt: 7x7 depthwise convs, channels-first and -last LayerNorm, GELU, layer scale."""
    import transformers

    config = transformers.ConvNextConfig(
        hidden_sizes=[16, 32, 48, 64],
        depths=[1, 1, 2, 1],
        num_labels=10,
        image_size=64,
        layer_scale_init_value=0.5,
    )
    return Model(Field(transformers.ConvNextForImageClassification(config), "logits"), _images(64))


@builder("swin")
def swin() -> Model:
    """Swin: shifted windows (roll, window partition and merge by reshapes) with relative position bias."""
    import transformers

    config = transformers.SwinConfig(
        image_size=32,
        patch_size=4,
        embed_dim=16,
        depths=[2, 2],
        num_heads=[2, 4],
        window_size=4,
        num_labels=10,
    )
    return Model(Field(transformers.SwinForImageClassification(config), "logits"), _images(32))


@builder("segformer")
def segformer() -> Model:
    """SegFormer: overlapping patch merging, spatial-reduction attention, bilinear upsampling in the head."""
    import transformers

    config = transformers.SegformerConfig(
        num_encoder_blocks=2,
        depths=[1, 1],
        sr_ratios=[2, 1],
        hidden_sizes=[16, 32],
        num_attention_heads=[1, 2],
        decoder_hidden_size=32,
        num_labels=4,
        patch_sizes=[7, 3],
        strides=[4, 2],
    )
    return Model(Field(transformers.SegformerForSemanticSegmentation(config), "logits"), _images(32))


@builder("whisper_encoder")
def whisper_encoder() -> Model:
    """Whisper's audio encoder: two 1-d convs over log-mel frames, sinusoidal positions, pre-norm layers."""
    import transformers

    config = transformers.WhisperConfig(
        vocab_size=VOCAB,
        num_mel_bins=16,
        d_model=64,
        encoder_layers=2,
        encoder_attention_heads=4,
        encoder_ffn_dim=128,
        decoder_layers=1,
        decoder_attention_heads=4,
        decoder_ffn_dim=128,
        max_source_positions=20,
        max_target_positions=16,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=1,
        attn_implementation="sdpa",
    )
    encoder = transformers.WhisperForConditionalGeneration(config).get_encoder()
    return Model(Field(encoder, "last_hidden_state"), lambda seed: (randn(seed, 1, 16, 40),))


@builder("wav2vec2")
def wav2vec2() -> Model:
    """wav2vec 2.0 CTC head over raw audio: strided conv feature extractor, group norm, conv positions."""
    import transformers

    config = transformers.Wav2Vec2Config(
        vocab_size=32,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        conv_dim=(32, 32, 32),
        conv_stride=(5, 2, 2),
        conv_kernel=(10, 3, 3),
        num_conv_pos_embeddings=16,
        num_conv_pos_embedding_groups=4,
        feat_extract_norm="group",
        do_stable_layer_norm=False,
        attn_implementation="eager",
    )
    return Model(Field(transformers.Wav2Vec2ForCTC(config), "logits"), lambda seed: (randn(seed, 1, 1600),))


# -- ExecuTorch's example models ---------------------------------------------------------------


def _example(module: torch.nn.Module, inputs: Callable[[int], tuple]) -> Model:
    return Model(module, inputs)


@builder("et_toy_mul")
def et_toy_mul() -> Model:
    from executorch.examples.models.toy_model import MulModule

    return _example(MulModule(), lambda seed: (randn(seed, 3, 2), randn(seed + 1, 3, 2)))


@builder("et_toy_add")
def et_toy_add() -> Model:
    from executorch.examples.models.toy_model import AddModule

    return _example(AddModule(), lambda seed: (randn(seed, 1), randn(seed + 1, 1)))


@builder("et_toy_add_mul")
def et_toy_add_mul() -> Model:
    from executorch.examples.models.toy_model import AddMulModule

    return _example(
        AddMulModule(), lambda seed: (randn(seed, 2, 2), randn(seed + 1, 2, 2), randn(seed + 2, 2, 2))
    )


@builder("et_toy_softmax")
def et_toy_softmax() -> Model:
    from executorch.examples.models.toy_model import SoftmaxModule

    return _example(SoftmaxModule(), lambda seed: (randn(seed, 2, 5),))


@builder("et_toy_conv1d")
def et_toy_conv1d() -> Model:
    from executorch.examples.models.toy_model import Conv1dModule

    return _example(Conv1dModule(), lambda seed: (randn(seed, 1, 3, 10),))


@builder("et_toy_linear")
def et_toy_linear() -> Model:
    from executorch.examples.models.toy_model import LinearModule

    return _example(LinearModule(), lambda seed: (randn(seed, 3, 3),))


@builder("et_toy_sdpa")
def et_toy_sdpa() -> Model:
    """The SDPA example, in float32 and a smaller shape than the example's (2, 8, 128, 64) bf16."""
    from executorch.examples.models.toy_model import SdpaModule

    return _example(SdpaModule(), lambda seed: tuple(randn(seed + i, 1, 4, 16, 8) for i in range(3)))


@builder("et_toy_sdpa_bf16")
def et_toy_sdpa_bf16() -> Model:
    """The SDPA example in its own dtype, bfloat16, at a smaller shape."""
    from executorch.examples.models.toy_model import SdpaModule

    return _example(
        SdpaModule(), lambda seed: tuple(randn(seed + i, 1, 2, 8, 8).to(torch.bfloat16) for i in range(3))
    )


@builder("et_lstm")
def et_lstm() -> Model:
    """The LSTM example (torch.nn.quantizable's LSTM, 2 layers), with its initial state."""
    from executorch.examples.models.lstm import LSTMModel

    example = LSTMModel()
    return _example(
        example.get_eager_model(),
        lambda seed: (randn(seed, 5, 3, 10), (randn(seed + 1, 2, 3, 20), randn(seed + 2, 2, 3, 20))),
    )


@builder("et_deep_autoencoder")
def et_deep_autoencoder() -> Model:
    from executorch.examples.models.mlperf_tiny import DeepAutoEncoder

    return _example(DeepAutoEncoder(), lambda seed: (randn(seed, 1, 640),))


@builder("et_ds_cnn")
def et_ds_cnn() -> Model:
    from executorch.examples.models.mlperf_tiny import DSCNNKWS

    return _example(DSCNNKWS(), lambda seed: (randn(seed, 1, 1, 49, 10),))


@builder("et_mobilenet_v1_025")
def et_mobilenet_v1_025() -> Model:
    from executorch.examples.models.mlperf_tiny import MobileNetV1025

    return _example(MobileNetV1025(), lambda seed: (randn(seed, 1, 3, 96, 96),))


@builder("et_resnet8")
def et_resnet8() -> Model:
    from executorch.examples.models.mlperf_tiny import ResNet8

    return _example(ResNet8(), lambda seed: (randn(seed, 1, 3, 32, 32),))


def _et_llama_args(**overrides):
    from executorch.examples.models.llama.model_args import ModelArgs

    args = dict(
        dim=64,
        n_layers=2,
        n_heads=4,
        n_kv_heads=2,
        vocab_size=VOCAB,
        hidden_dim=128,
        max_seq_len=32,
        max_context_len=32,
        max_batch_size=1,
        norm_eps=1e-5,
    )
    args.update(overrides)
    return ModelArgs(**args)


@builder("et_llama")
def et_llama() -> Model:
    """ExecuTorch's Llama example transformer (no KV cache), logits of the last token."""
    from executorch.examples.models.llama.llama_transformer import construct_transformer

    module = construct_transformer(_et_llama_args())
    return _example(module, lambda seed: (tokens(seed, VOCAB, 1, 10),))


class _KVStep(torch.nn.Module):
    """One decoding step of a KV-cached transformer: (tokens, position) -> logits; the caches are buffers."""

    def __init__(self, transformer: torch.nn.Module) -> None:
        super().__init__()
        self.transformer = transformer

    def forward(self, tokens: torch.Tensor, input_pos: torch.Tensor) -> torch.Tensor:
        return self.transformer(tokens, {"input_pos": input_pos})


@builder("et_llama_kv")
def et_llama_kv() -> Model:
    """ExecuTorch's Llama example with its KV cache (mutable buffers updated by index_put each step)."""
    from executorch.examples.models.llama.llama_transformer import construct_transformer

    module = construct_transformer(_et_llama_args(use_kv_cache=True, enable_dynamic_shape=False))
    return _example(
        _KVStep(module),
        lambda seed: (tokens(seed, VOCAB, 1, 1), torch.tensor([seed], dtype=torch.long)),
    )


# -- dynamic shapes ------------------------------------------------------------------------------------

# Sequence lengths by input seed: seed 0 (the export example) first, then shorter, the bound, and one.
SEQ_LENGTHS = (12, 5, 32, 1, 17)


def _seq_dim(name: str = "seq"):
    from torch.export import Dim

    return Dim(name, min=1, max=32)


@builder("llama_dynamic")
def llama_dynamic() -> Model:
    """The Llama above with a sequence length anywhere up to 32 tokens."""
    model = llama()
    model.make_inputs = lambda seed: (tokens(seed, VOCAB, 1, SEQ_LENGTHS[seed % len(SEQ_LENGTHS)]),)
    model.dynamic_shapes = (({1: _seq_dim()},),)  # Field takes *args: one tuple
    return model


@builder("bert_dynamic")
def bert_dynamic() -> Model:
    """The BERT above with a dynamic sequence length (and its padding mask and token types with it)."""
    model = bert()

    def inputs(seed: int) -> tuple:
        n = SEQ_LENGTHS[seed % len(SEQ_LENGTHS)]
        ids = tokens(seed, VOCAB, 2, n)
        mask = torch.ones(2, n, dtype=torch.long)
        mask[1, max(1, n // 2) :] = 0
        types = torch.zeros(2, n, dtype=torch.long)
        types[:, n // 3 :] = 1
        return ids, mask, types

    seq = _seq_dim()
    model.make_inputs = inputs
    model.dynamic_shapes = (({1: seq}, {1: seq}, {1: seq}),)
    return model


@builder("gpt2_dynamic")
def gpt2_dynamic() -> Model:
    """The GPT-2 above with a dynamic sequence length (positions up to its 32).

    The batch stays static: ExecuTorch 1.5.1 plans a dynamic batch of this model at the example's
    size (its input's upper bound comes out as (2, 32) for a batch Dim of max 4), and its runtime
    then refuses any other batch size.
    """
    model = gpt2()
    model.make_inputs = lambda seed: (tokens(seed, VOCAB, 2, SEQ_LENGTHS[seed % len(SEQ_LENGTHS)]),)
    model.dynamic_shapes = (({1: _seq_dim()},),)
    return model


@builder("et_llama_kv_dynamic")
def et_llama_kv_dynamic() -> Model:
    """The KV-cached Llama example taking any number of new tokens: a whole prompt at once, then one by one."""
    from executorch.examples.models.llama.llama_transformer import construct_transformer
    from torch.export import Dim

    module = construct_transformer(_et_llama_args(use_kv_cache=True, enable_dynamic_shape=True))
    model = _example(
        _KVStep(module),
        lambda seed: (tokens(seed, VOCAB, 1, 5 + seed), torch.tensor([0], dtype=torch.long)),
    )
    model.dynamic_shapes = ({1: Dim("seq", min=1, max=16)}, None)
    return model
