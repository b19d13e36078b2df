"""transformers' language models (and CLIP, whose text tower is one), shrunk to a few hundred thousand
weights."""

from __future__ import annotations

from collections.abc import Callable

import torch

from tests.support.models.registry import ENCODER, VOCAB, Model, builder, from_transformers, randn, tokens


def token_inputs(*shape: int) -> Callable[[int], tuple]:
    return lambda seed: (tokens(seed, VOCAB, *shape),)


def _causal_lm(config: str, model: str, shape: tuple[int, int], **settings) -> Model:
    """A decoder's logits for a batch of token ids of ``shape``, without a KV cache."""
    return from_transformers(
        config, model, "logits", inputs=token_inputs(*shape), call={"use_cache": False},
        vocab_size=VOCAB, use_cache=False, **settings,
    )


@builder("llama")
def llama() -> Model:
    """Llama: RMSNorm, rotary embeddings, grouped-query attention, SwiGLU MLP."""
    return _causal_lm(
        "LlamaConfig", "LlamaForCausalLM", (1, 12), hidden_size=64, intermediate_size=160,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        attn_implementation="sdpa",
    )


@builder("qwen3")
def qwen3() -> Model:
    """Qwen3: Llama-like with per-head RMSNorm on queries and keys, eager attention."""
    return _causal_lm(
        "Qwen3Config", "Qwen3ForCausalLM", (2, 9), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=64,
        attn_implementation="eager",
    )


@builder("stablelm")
def stablelm() -> Model:
    """StableLM: partial rotary embeddings (a quarter of each head), per-head LayerNorm on queries and keys,
    biased q/k/v projections, LayerNorm, SwiGLU MLP. At this size the keys' per-head split reads their
    transposed heads as a view (the exporter's copy becomes one), which PyTorch's CUDA split kernel got
    wrong (kernels/split.py)."""
    return _causal_lm(
        "StableLmConfig", "StableLmForCausalLM", (1, 8), hidden_size=32, intermediate_size=64,
        num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2, partial_rotary_factor=0.25,
        qk_layernorm=True, use_qkv_bias=True, max_position_embeddings=64, attn_implementation="sdpa",
    )


@builder("gpt2")
def gpt2() -> Model:
    """GPT-2: learned positions, LayerNorm, fused QKV (Conv1D), tanh GELU, tied embeddings."""
    return _causal_lm(
        "GPT2Config", "GPT2LMHeadModel", (2, 10), n_positions=32, n_embd=64, n_layer=2, n_head=4,
        bos_token_id=1, eos_token_id=2, attn_implementation="eager",
    )


@builder("mamba")
def mamba() -> Model:
    """Mamba: causal depthwise conv1d and the selective state-space scan (unrolled over the sequence)."""
    return _causal_lm(
        "MambaConfig", "MambaForCausalLM", (1, 6), hidden_size=32, state_size=8, num_hidden_layers=2,
        expand=2, conv_kernel=4,
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
    return from_transformers(
        "BertConfig", "BertModel", "last_hidden_state", "pooler_output", inputs=_bert_inputs,
        vocab_size=VOCAB, **ENCODER, max_position_embeddings=32, type_vocab_size=2,
        attn_implementation="eager",
    )


@builder("distilbert")
def distilbert() -> Model:
    """DistilBERT sequence classifier (sdpa attention with a padding mask)."""
    return from_transformers(
        "DistilBertConfig", "DistilBertForSequenceClassification", "logits",
        inputs=lambda seed: _bert_inputs(seed)[:2], vocab_size=VOCAB, dim=64, n_layers=2, n_heads=4,
        hidden_dim=128, max_position_embeddings=32, num_labels=3, attn_implementation="sdpa",
    )


@builder("deberta_v2")
def deberta_v2() -> Model:
    """DeBERTa-v2: disentangled attention with log-bucketed relative positions gathered per query."""
    return from_transformers(
        "DebertaV2Config", "DebertaV2Model", "last_hidden_state", inputs=token_inputs(1, 12),
        vocab_size=VOCAB, **ENCODER, max_position_embeddings=32, relative_attention=True, position_buckets=8,
        pos_att_type=["p2c", "c2p"],
    )


class _Seq2Seq(torch.nn.Module):
    """(encoder ids, decoder ids) -> logits; the model's second positional argument is the mask."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor, decoder_input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, decoder_input_ids=decoder_input_ids, use_cache=False).logits


@builder("t5")
def t5() -> Model:
    """T5 encoder-decoder: relative position buckets, RMS-style LayerNorm, gated GELU."""
    import transformers

    config = transformers.T5Config(
        vocab_size=VOCAB, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2, num_heads=4,
        relative_attention_num_buckets=8, relative_attention_max_distance=16, feed_forward_proj="gated-gelu",
        use_cache=False, decoder_start_token_id=0, pad_token_id=0,
    )
    return Model(
        _Seq2Seq(transformers.T5ForConditionalGeneration(config)),
        lambda seed: (tokens(seed, VOCAB, 1, 10), tokens(seed + 7, VOCAB, 1, 6)),
    )


@builder("clip")
def clip() -> Model:
    """CLIP: a text and an image tower, pooled at each text's end token, and their scaled similarities."""

    def inputs(seed: int) -> tuple:
        ids = tokens(seed, VOCAB - 3, 2, 8) + 3  # no end token (2) but the ones placed below
        ids[0, 5 - seed % 3] = 2
        ids[1, 7] = 2
        return ids, randn(seed, 3, 3, 32, 32)

    tower = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2)
    return from_transformers(
        "CLIPConfig", "CLIPModel", "logits_per_image", "logits_per_text", inputs=inputs,
        text_config=dict(
            vocab_size=VOCAB, **tower, max_position_embeddings=16, bos_token_id=1, eos_token_id=2
        ),
        vision_config=dict(**tower, image_size=32, patch_size=8),
        projection_dim=16,
    )
