"""Small vision-language and audio-language programs, exported the way optimum-executorch exports them.

optimum-executorch's ``MultiModalTextToTextExportableModule`` (task "image-text-to-text" or
"multimodal-text-to-text") splits a transformers model into the methods ExecuTorch's ``MultimodalRunner``
reads, each exported with ``torch.export`` (strict, as it does) and lowered together by its portable recipe
(``to_edge_transform_and_lower``, no partitioner, ``_skip_dim_order``) with the metadata its
``save_config_to_constant_methods`` writes:

- ``text_decoder``: transformers' ``TorchExportableModuleForDecoderOnlyLM`` around the whole model (a static
  cache, or the hybrid one where the config has sliding layers), taking ``inputs_embeds`` [1, n, hidden] and
  ``cache_position`` [n], n up to ``get_max_seq_len() - 1``;
- ``token_embedding``: the model's input embeddings, tokens [1, n] to [1, n, hidden];
- ``vision_encoder``: ``get_image_features`` of ``pixel_values`` [1, 3, H, W], stacked to [images, tokens,
  hidden]; or ``audio_encoder``: ``get_audio_features`` of ``input_features`` [chunks, mel bins, frames]
  (chunks dynamic, from 1 to 10), as [1, tokens, hidden].

The models are transformers' own classes made from small configs with seeded random weights, encoders of one
layer and text models of two (ExecuTorch's lowering takes time in proportion to the graph):

- "llava": ``LlavaForConditionalGeneration``, a CLIP vision tower (32x32 images, 8x8 patches: 16 image
  tokens, the class token dropped) and a Llama text model;
- "gemma3": ``Gemma3ForConditionalGeneration``, a SigLIP tower pooled to 4 image tokens and Gemma 3's text
  model (scaled embeddings, sliding and global layers: the hybrid cache);
- "voxtral": ``VoxtralForConditionalGeneration``, its Whisper-style audio encoder (16 mel bins, 100 frames
  a chunk, 25 audio tokens a chunk) and a Llama text model.

and one the way ExecuTorch's own LLaVA example exports (examples/models/llava/export_llava.py, without its
quantization), "llava-executorch": ExecuTorch's Llama transformer with its custom KV cache and ``llama::custom_sdpa``
as ``text_decoder`` (embeddings and a start position [1]), its embedding table as ``token_embedding``, and a
``vision_encoder`` taking a uint8 (3, H, W) image of up to 32x32 (dynamic) that it pads, rescales and normalizes
itself before the CLIP tower and projector; inputs left unplanned (``alloc_graph_input=False``), and only
``get_max_seq_len`` as metadata.

The text models share the test tokenizer (tests/support/llm_tokenizers.py, 512 tokens); their vocabulary
has one more id, the image or audio token (512), which the tokenizer never produces, as real models append
theirs. ``audio_processor()`` is ExecuTorch's own Whisper feature extractor program
(``executorch.extension.audio.mel_spectrogram``, what ExecuTorch's Voxtral example exports) sized for that
encoder: waveform samples at 16 kHz in, [chunks, 16, 100] features out.

Each program is exported once into the program cache (tests/support/exporting.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from tests.support.exporting import locked, publish, scratch
from tests.support.llm_tokenizers import BOS_ID, EOS_ID, VOCAB, tokenizer_path

MAX_LENGTH = 64  # optimum-executorch's max_length: the cache, and get_max_seq_len
MEDIA_TOKEN_ID = VOCAB  # the image or audio token, one past the tokenizer's vocabulary
IMAGE_SIZE = 32
MEL_BINS, CHUNK_FRAMES, AUDIO_TOKENS_PER_CHUNK = 16, 100, 25
MODELS = ("llava", "gemma3", "voxtral", "llava-executorch")
_VERSION = "v2"  # bump to re-export after a recipe change


@dataclass(frozen=True)
class MultimodalProgram:
    name: str
    pte: Path
    tokenizer: Path
    modality: str  # "vision" or "audio"
    media_tokens: int  # positions one image (or one audio chunk) fills
    uint8_images: bool = False  # the vision encoder takes uint8 pixels (of any size up to IMAGE_SIZE)

    @property
    def media_token_id(self) -> int:
        return MEDIA_TOKEN_ID


def _text(**overrides) -> dict:
    return dict(vocab_size=VOCAB + 1, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=MAX_LENGTH,
                bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=0, **overrides)


def _model(name: str):
    import transformers as t

    if name == "llava":
        vision = t.CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                    image_size=IMAGE_SIZE, patch_size=8, projection_dim=32)
        # The last layer's features: with one layer, LLaVA's default (the one before last) would skip it.
        config = t.LlavaConfig(vision_config=vision, text_config=t.LlamaConfig(**_text()),
                               image_token_id=MEDIA_TOKEN_ID, vision_feature_layer=-1)
        return t.LlavaForConditionalGeneration(config), "vision", "image_token_id"
    if name == "gemma3":
        vision = t.SiglipVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                      num_attention_heads=2, image_size=IMAGE_SIZE, patch_size=8)
        text = t.Gemma3TextConfig(**_text(head_dim=16, sliding_window=16, query_pre_attn_scalar=16))
        config = t.Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4,
                                image_token_id=MEDIA_TOKEN_ID, boi_token_id=3, eoi_token_id=4)
        return t.Gemma3ForConditionalGeneration(config), "vision", "image_token_id"
    if name == "voxtral":
        audio = t.VoxtralEncoderConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                       num_attention_heads=2, num_mel_bins=MEL_BINS,
                                       max_source_positions=CHUNK_FRAMES // 2)
        config = t.VoxtralConfig(audio_config=audio, text_config=t.LlamaConfig(**_text()),
                                 audio_token_id=MEDIA_TOKEN_ID, projector_hidden_act="gelu")
        return t.VoxtralForConditionalGeneration(config), "audio", "audio_token_id"
    raise ValueError(name)


class _VisionEncoder(torch.nn.Module):
    """optimum-executorch's VisionExportableModule."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_features):
        embeds = self.model.get_image_features(input_features)
        embeds = getattr(embeds, "pooler_output", embeds)
        return torch.stack(embeds) if isinstance(embeds, (list, tuple)) else embeds


class _AudioEncoder(torch.nn.Module):
    """optimum-executorch's AudioExportableModule."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_features):
        embeds = self.model.get_audio_features(input_features)
        return getattr(embeds, "pooler_output", embeds).unsqueeze(0)


def _metadata(model, modality: str, token_key: str) -> dict:
    """What optimum-executorch's save_config_to_constant_methods writes (None values left out, as it does)."""
    text = model.config.text_config
    metadata = {
        "get_dtype": 6, "get_bos_id": text.bos_token_id, "get_eos_id": text.eos_token_id,
        "get_head_dim": text.hidden_size / text.num_attention_heads, "get_n_kv_heads": text.num_key_value_heads,
        "get_n_layers": text.num_hidden_layers, "get_vocab_size": text.vocab_size, "get_max_batch_size": 1,
        "get_max_seq_len": MAX_LENGTH, "use_kv_cache": True, "sliding_window": getattr(text, "sliding_window", None),
        "use_sdpa_with_kv_cache": False, "enable_dynamic_shape": True,
        f"{modality}_token_id": getattr(model.config, token_key),
    }
    return {key: value for key, value in metadata.items() if value is not None}


def export_multimodal(directory: Path, name: str, *, seed: int = 0) -> Path:
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower
    from transformers import GenerationConfig
    from transformers.integrations.executorch import TorchExportableModuleForDecoderOnlyLM

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model, modality, token_key = _model(name)
    model = model.eval().requires_grad_(False)
    model.generation_config = GenerationConfig(use_cache=True, cache_implementation="static", max_length=MAX_LENGTH,
                                               cache_config={"batch_size": 1, "max_cache_len": MAX_LENGTH,
                                                             "device": "cpu"})
    metadata = _metadata(model, modality, token_key)
    hidden = model.config.text_config.hidden_size
    seq = torch.export.Dim("seq_length_dim", max=min(MAX_LENGTH, metadata.get("sliding_window", MAX_LENGTH)) - 1)
    programs = {}
    with torch.no_grad():
        embeds, positions = torch.zeros(1, 3, hidden), torch.arange(3)
        programs["text_decoder"] = TorchExportableModuleForDecoderOnlyLM(model).export(
            inputs_embeds=embeds, cache_position=positions,
            dynamic_shapes={"inputs_embeds": {1: seq}, "cache_position": {0: seq}}, strict=True)
        programs["token_embedding"] = torch.export.export(
            model.get_input_embeddings(), (torch.zeros(1, 3, dtype=torch.long),), dynamic_shapes=({1: seq},),
            strict=True)
        if modality == "vision":
            encoder, features, shapes = _VisionEncoder(model), torch.zeros(1, 3, IMAGE_SIZE, IMAGE_SIZE), None
        else:
            encoder = _AudioEncoder(model)
            features = torch.zeros(2, MEL_BINS, CHUNK_FRAMES)  # two chunks, so the batch is not specialized
            shapes = {"input_features": {0: torch.export.Dim("enc_batch_size_dim", min=1, max=10)}}
        # One eager call first: transformers installs its output-capturing hooks on the first call, under a lock
        # strict tracing cannot enter.
        encoder(features)
        programs[f"{modality}_encoder"] = torch.export.export(encoder, (), {"input_features": features},
                                                              dynamic_shapes=shapes, strict=True)
    program = to_edge_transform_and_lower(
        programs, partitioner=[], constant_methods=metadata,
        compile_config=EdgeCompileConfig(_check_ir_validity=False, _skip_dim_order=True),
    ).to_executorch()
    directory.mkdir(parents=True, exist_ok=True)
    pte = directory / "model.pte"
    pte.write_bytes(program.buffer)
    return pte


class _ExampleVisionEncoder(torch.nn.Module):
    """ExecuTorch's Llava.image_embedding: a uint8 (3, h, w) image padded to the crop size, rescaled, normalized
    (CLIP's mean and std), then the vision tower's features and the projector."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.register_buffer("mean", torch.tensor([0.48145466, 0.4578275, 0.40821073]).reshape(3, 1, 1))
        self.register_buffer("std", torch.tensor([0.26862954, 0.26130258, 0.27577711]).reshape(3, 1, 1))

    def forward(self, images):
        # Padded right and below (ExecuTorch's centres the image: sizes export cannot prove whole here).
        right, bottom = IMAGE_SIZE - images.shape[2], IMAGE_SIZE - images.shape[1]
        torch._check(right >= 0)
        torch._check(bottom >= 0)
        padded = torch.nn.functional.pad(images.to(torch.float32), (0, right, 0, bottom))
        normed = (padded * (1 / 255) - self.mean) / self.std
        return _VisionEncoder(self.model)(normed.unsqueeze(0))


class _ExampleTextDecoder(torch.nn.Module):
    """export_llava.py's LlavaTextModel: (embeddings, input_pos) into ExecuTorch's Llama transformer."""

    def __init__(self, transformer):
        super().__init__()
        self.text_model = transformer

    def forward(self, embeddings, input_pos):
        return self.text_model(None, {"input_pos": input_pos}, embeddings)


def export_llava_example(directory: Path, *, seed: int = 0) -> Path:
    from executorch.examples.models.llama.llama_transformer import construct_transformer
    from executorch.examples.models.llama.model_args import ModelArgs
    from executorch.examples.models.llama.source_transformation.custom_kv_cache import (
        replace_kv_cache_with_custom_kv_cache,
    )
    from executorch.examples.models.llama.source_transformation.sdpa import replace_sdpa_with_custom_op
    from executorch.exir import EdgeCompileConfig, ExecutorchBackendConfig, to_edge_transform_and_lower
    from executorch.exir.passes import MemoryPlanningPass
    from executorch.exir.passes.sym_shape_eval_pass import ConstraintBasedSymShapeEvalPass
    from torch.export import Dim

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        llava, _, _ = _model("llava")
        args = ModelArgs(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=VOCAB + 1, hidden_dim=128,
                         max_batch_size=1, use_kv_cache=True, enable_dynamic_shape=True,
                         use_sdpa_with_kv_cache_op=True, use_hf_rope=True, max_seq_len=MAX_LENGTH,
                         max_context_len=MAX_LENGTH)
        text = replace_sdpa_with_custom_op(replace_kv_cache_with_custom_kv_cache(construct_transformer(args)))
    llava, text = llava.eval().requires_grad_(False), text.eval().requires_grad_(False)
    encoder, decoder = _ExampleVisionEncoder(llava).eval(), _ExampleTextDecoder(text).eval()
    image = torch.zeros(3, IMAGE_SIZE - 4, IMAGE_SIZE, dtype=torch.uint8)
    encoder(image)  # transformers' output-capturing hooks, installed on a first eager call
    tokens = Dim("token_dim_1", min=2, max=MAX_LENGTH)
    with torch.nn.attention.sdpa_kernel([torch.nn.attention.SDPBackend.MATH]), torch.no_grad():
        programs = {
            "vision_encoder": torch.export.export(
                encoder, (image,), dynamic_shapes=({1: Dim("img_h", max=IMAGE_SIZE),
                                                    2: Dim("img_w", max=IMAGE_SIZE)},), strict=False),
            "text_decoder": torch.export.export(
                decoder, (torch.zeros(1, 20, 64), torch.tensor([0])),
                dynamic_shapes=({1: Dim("token_dim", min=2, max=MAX_LENGTH - 1)}, None), strict=True),
            "token_embedding": torch.export.export(
                text.tok_embeddings, (torch.zeros(1, 3, dtype=torch.long),), dynamic_shapes=[{1: tokens}],
                strict=True),
        }
    program = to_edge_transform_and_lower(
        programs, constant_methods={"get_max_seq_len": MAX_LENGTH},
        compile_config=EdgeCompileConfig(_check_ir_validity=False),
    ).to_executorch(ExecutorchBackendConfig(
        memory_planning_pass=MemoryPlanningPass(alloc_graph_input=False),
        # ExecuTorch's example plans token_embedding at its example's length (HintBasedSymShapeEvalPass), which
        # leaves it three tokens a call; planned at its bound, it takes a prompt in one.
        sym_shape_eval_pass=ConstraintBasedSymShapeEvalPass(),
    ))
    directory.mkdir(parents=True, exist_ok=True)
    pte = directory / "model.pte"
    pte.write_bytes(program.buffer)
    return pte


def _cached(key: str, export) -> Path:
    with locked(key) as directory:
        if not directory.exists():
            partial = scratch(directory)
            export(partial)
            publish(partial, directory)
        return directory


def media(program: MultimodalProgram, seed: int = 0, *, chunks: int = 2):
    """A float32 image (C, H, W) in [0, 1) for a vision program (uint8 pixels, a little smaller than the bound, for
    one that takes them), else audio features (chunks, n_bins, n_frames)."""
    generator = torch.Generator().manual_seed(seed)
    if program.uint8_images:
        return torch.randint(0, 256, (3, IMAGE_SIZE - 4, IMAGE_SIZE), generator=generator, dtype=torch.uint8)
    if program.modality == "vision":
        return torch.rand(3, IMAGE_SIZE, IMAGE_SIZE, generator=generator)
    return torch.randn(chunks, MEL_BINS, CHUNK_FRAMES, generator=generator)


def multimodal_program(name: str) -> MultimodalProgram:
    """The exported ``name`` (one of MODELS), with the test tokenizer."""
    export = export_llava_example if name == "llava-executorch" else (lambda d: export_multimodal(d, name))
    directory = _cached(f"mm-{name}-{_VERSION}", export)
    media = {"llava": 16, "gemma3": 4, "voxtral": AUDIO_TOKENS_PER_CHUNK, "llava-executorch": 16}[name]
    modality = "audio" if name == "voxtral" else "vision"
    return MultimodalProgram(name, directory / "model.pte", tokenizer_path(), modality, media,
                             uint8_images=name == "llava-executorch")


def audio_processor() -> Path:
    """ExecuTorch's WhisperAudioProcessor for the Voxtral program's encoder: 1 s chunks of 16 kHz samples, 16 mel
    bins, stacked per chunk ([chunks, 16, 100]), exported by ExecuTorch's own exporter (XNNPACK)."""
    def export(directory: Path) -> None:
        from executorch.extension.audio.mel_spectrogram import export_processor

        export_processor(str(directory / "processor.pte"), feature_size=MEL_BINS, chunk_length=1, max_audio_len=4,
                         stack_output=True)

    return _cached(f"mm-audio-processor-{_VERSION}", export) / "processor.pte"
