"""transformers' image and audio models, shrunk to a few hundred thousand weights."""

from __future__ import annotations

from collections.abc import Callable

from tests.support.models.registry import ENCODER, VOCAB, Field, Model, builder, from_transformers, randn


def image_inputs(size: int, batch: int = 1) -> Callable[[int], tuple]:
    return lambda seed: (randn(seed, batch, 3, size, size),)


@builder("vit")
def vit() -> Model:
    """ViT image classifier: patch embedding conv, CLS token, pre-norm encoder."""
    return from_transformers(
        "ViTConfig", "ViTForImageClassification", "logits", inputs=image_inputs(32),
        image_size=32, patch_size=8, **ENCODER, num_labels=10, attn_implementation="sdpa",
    )


@builder("dinov2")
def dinov2() -> Model:
    """DINOv2 on images larger than its config's: bicubic position-embedding interpolation, layer scale."""
    return from_transformers(
        "Dinov2Config", "Dinov2Model", "last_hidden_state", "pooler_output", inputs=image_inputs(48),
        image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=1, num_attention_heads=2, mlp_ratio=2,
        attn_implementation="sdpa",
    )


@builder("mobilenet_v2")
def mobilenet_v2() -> Model:
    """MobileNetV2: inverted residuals, depthwise convs, ReLU6, batch norm (folded into eval)."""
    return from_transformers(
        "MobileNetV2Config", "MobileNetV2ForImageClassification", "logits", inputs=image_inputs(64),
        image_size=64, depth_multiplier=0.35, num_labels=10, tf_padding=True,
    )


@builder("resnet")
def resnet() -> Model:
    """ResNet with bottleneck blocks, max pooling and adaptive average pooling."""
    return from_transformers(
        "ResNetConfig", "ResNetForImageClassification", "logits", inputs=image_inputs(48, batch=2),
        embedding_size=16, hidden_sizes=[16, 32, 64, 96], depths=[1, 1, 2, 1], layer_type="bottleneck",
        num_labels=10, downsample_in_bottleneck=True,
    )


@builder("convnext")
def convnext() -> Model:
    """ConvNeXt: 7x7 depthwise convs, channels-first and -last LayerNorm, GELU, layer scale."""
    return from_transformers(
        "ConvNextConfig", "ConvNextForImageClassification", "logits", inputs=image_inputs(64),
        hidden_sizes=[16, 32, 48, 64], depths=[1, 1, 2, 1], num_labels=10, image_size=64,
        layer_scale_init_value=0.5,
    )


@builder("swin")
def swin() -> Model:
    """Swin: shifted windows (roll, window partition and merge by reshapes) with relative position bias."""
    return from_transformers(
        "SwinConfig", "SwinForImageClassification", "logits", inputs=image_inputs(32),
        image_size=32, patch_size=4, embed_dim=16, depths=[2, 2], num_heads=[2, 4], window_size=4,
        num_labels=10,
    )


@builder("segformer")
def segformer() -> Model:
    """SegFormer: overlapping patch merging, spatial-reduction attention, bilinear upsampling in the head."""
    return from_transformers(
        "SegformerConfig", "SegformerForSemanticSegmentation", "logits", inputs=image_inputs(32),
        num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[16, 32],
        num_attention_heads=[1, 2], decoder_hidden_size=32, num_labels=4, patch_sizes=[7, 3], strides=[4, 2],
    )


# -- audio -------------------------------------------------------------------------------------------------


@builder("whisper_encoder")
def whisper_encoder() -> Model:
    """Whisper's audio encoder: two 1-d convs over log-mel frames, sinusoidal positions, pre-norm layers."""
    import transformers

    config = transformers.WhisperConfig(
        vocab_size=VOCAB, num_mel_bins=16, d_model=64, encoder_layers=2, encoder_attention_heads=4,
        encoder_ffn_dim=128, decoder_layers=1, decoder_attention_heads=4, decoder_ffn_dim=128,
        max_source_positions=20, max_target_positions=16, pad_token_id=0, bos_token_id=1, eos_token_id=2,
        decoder_start_token_id=1, attn_implementation="sdpa",
    )
    encoder = transformers.WhisperForConditionalGeneration(config).get_encoder()
    return Model(Field(encoder, "last_hidden_state"), lambda seed: (randn(seed, 1, 16, 40),))


@builder("wav2vec2")
def wav2vec2() -> Model:
    """wav2vec 2.0 CTC head over raw audio: strided conv feature extractor, group norm, conv positions."""
    return from_transformers(
        "Wav2Vec2Config", "Wav2Vec2ForCTC", "logits", inputs=lambda seed: (randn(seed, 1, 1600),),
        vocab_size=32, **ENCODER, conv_dim=(32, 32, 32), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3),
        num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4, feat_extract_norm="group",
        do_stable_layer_norm=False, attn_implementation="eager",
    )
