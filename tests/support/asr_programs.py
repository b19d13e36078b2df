"""A tiny Whisper exported as optimum-executorch exports Whisper, its tokenizer, and audio to transcribe.

- ``whisper_tokenizer()``: a Whisper-style tokenizer.json: a byte-level BPE trained on
  tests/support/text/corpus.txt (its characters only, so every text token decodes on its own), then
  Whisper's markers in Whisper's order (``<|endoftext|>``, ``<|startoftranscript|>``, six languages, the
  tasks, ``<|startoflm|>``, ``<|startofprev|>``, ``<|nospeech|>``, ``<|notimestamps|>``, a few timestamps).
- ``tiny_whisper()``: transformers' WhisperForConditionalGeneration from a small config (80 mel bands and
  Whisper's 30 s windows of 3,000 frames, one encoder and one decoder layer of width 16) with seeded random
  weights, drawn wide enough (``init_std``) that what it says depends on the audio. Its EOS row copies a
  token the seeded model often picks, so that some clips end early and others run to the limit.
- ``whisper_program()``: that model exported as optimum-executorch's ``automatic-speech-recognition`` task
  exports Whisper (Seq2SeqLMExportableModule) with its ``portable`` recipe: ``encoder`` (features
  [1, 80, 3000] -> states), ``text_decoder`` (token [1, 1], states, cache position [1] -> logits [1, 1, vocab])
  over a static self-attention cache of ``MAX_SEQ_LEN`` positions and a static cross-attention cache,
  ``sampler`` (the argmax), and their constant methods (``save_config_to_constant_methods``). Its ``xnnpack``
  recipe makes the same methods, partitioned for XNNPACK (which pterun's XNNPACK tests cover); lowering them
  takes twice as long, so the suite exports the portable one. optimum-executorch's own pass that drops the
  embedding's ``padding_idx`` is left out: the argument changes only gradients. transformers 5 keeps a
  cache's length in a tensor of each layer (``cumulative_length``): it is registered as a buffer and set from
  the cache position on each call, as transformers' own ExecuTorch integration does.
- ``clip(seconds, seed)``: a few seconds of speech-like sound (gliding tones in noise), float32 at 16 kHz.

Everything is written once into the program cache (tests/support/exporting.py) and reused.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from tests.support.exporting import locked, publish, scratch

CORPUS = Path(__file__).parent / "text" / "corpus.txt"
TEXT_VOCAB = 256
LANGUAGES = ("en", "zh", "de", "es", "ru", "fr")
MARKERS = ("<|endoftext|>", "<|startoftranscript|>", *(f"<|{code}|>" for code in LANGUAGES), "<|translate|>",
           "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nospeech|>", "<|notimestamps|>",
           *(f"<|{0.02 * i:.2f}|>" for i in range(4)))
VOCAB = TEXT_VOCAB + len(MARKERS)
IDS = {marker: TEXT_VOCAB + i for i, marker in enumerate(MARKERS)}
EOT, SOT, NO_TIMESTAMPS = IDS["<|endoftext|>"], IDS["<|startoftranscript|>"], IDS["<|notimestamps|>"]
MAX_SEQ_LEN = 48  # the decoder's self-attention cache (the model has 64 position embeddings)
EOS_LIKE = 38  # a text token the seeded model often picks: the EOS row copies it
_VERSION = "v2"  # bump to rebuild after a recipe change


def whisper_tokenizer() -> Path:
    with locked(f"asr-tokenizer-{_VERSION}") as directory:
        path = directory / "tokenizer.json"
        if not path.exists():
            partial = scratch(directory)
            _train_tokenizer(partial / "tokenizer.json")
            publish(partial, directory)
        return path


def _train_tokenizer(path: Path) -> None:
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=TEXT_VOCAB, show_progress=False)
    tokenizer.train_from_iterator(CORPUS.read_text().split("\n\n"), trainer)
    assert tokenizer.get_vocab_size() == TEXT_VOCAB, f"the corpus gives {tokenizer.get_vocab_size()} tokens"
    tokenizer.add_special_tokens([AddedToken(marker, special=True, normalized=False) for marker in MARKERS])
    assert {marker: tokenizer.token_to_id(marker) for marker in MARKERS} == IDS
    tokenizer.save(str(path))


def whisper_config():
    from transformers import WhisperConfig

    return WhisperConfig(
        vocab_size=VOCAB, num_mel_bins=80, d_model=16, encoder_layers=1, encoder_attention_heads=2,
        decoder_layers=1, decoder_attention_heads=2, encoder_ffn_dim=32, decoder_ffn_dim=32,
        max_source_positions=1500, max_target_positions=64, init_std=1.0,
        bos_token_id=EOT, eos_token_id=EOT, pad_token_id=EOT, decoder_start_token_id=SOT,
        begin_suppress_tokens=None, suppress_tokens=None,
    )


def tiny_whisper():
    """The eager model, the same weights every time; its generation config knows the markers, as the configs
    of Hugging Face's Whisper checkpoints do."""
    from transformers import WhisperForConditionalGeneration

    with torch.random.fork_rng():
        torch.manual_seed(2)
        model = WhisperForConditionalGeneration(whisper_config()).eval()
    with torch.no_grad():
        model.proj_out.weight[EOT] = model.proj_out.weight[EOS_LIKE] * 1.02
    generation = model.generation_config
    generation.is_multilingual = True
    generation.lang_to_id = {f"<|{code}|>": IDS[f"<|{code}|>"] for code in LANGUAGES}
    generation.task_to_id = {"transcribe": IDS["<|transcribe|>"], "translate": IDS["<|translate|>"]}
    generation.no_timestamps_token_id = NO_TIMESTAMPS
    return model


@dataclass(frozen=True)
class WhisperProgram:
    pte: Path
    tokenizer: Path
    metadata: dict  # the constant methods written


def whisper_program() -> WhisperProgram:
    tokenizer = whisper_tokenizer()
    with locked(f"asr-whisper-{_VERSION}") as directory:
        pte = directory / "model.pte"
        if not pte.exists():
            partial = scratch(directory)
            metadata = _export(partial / "model.pte")
            (partial / "metadata.json").write_text(json.dumps(metadata))
            publish(partial, directory)
        return WhisperProgram(pte, tokenizer, json.loads((directory / "metadata.json").read_text()))


class _Encoder(torch.nn.Module):
    def __init__(self, encoder):
        super().__init__()
        self.encoder = encoder

    def forward(self, input_features):
        return self.encoder(input_features).last_hidden_state


class _Decoder(torch.nn.Module):
    """The decoder over static self- and cross-attention caches, registered as the program's buffers."""

    def __init__(self, model, max_seq_len: int):
        from transformers import EncoderDecoderCache, StaticCache

        super().__init__()
        config = model.config
        self.decoder = model.get_decoder()
        self.proj_out = model.proj_out
        heads, head_dim = config.decoder_attention_heads, config.d_model // config.decoder_attention_heads
        caches = []
        for length in (max_seq_len, config.max_source_positions):
            cache = StaticCache(config=config, max_cache_len=length)
            cache.early_initialization(1, heads, head_dim, torch.float32, torch.device("cpu"))
            caches.append(cache)
        self.self_attention, self.cross_attention = caches
        for kind, cache in (("self", self.self_attention), ("cross", self.cross_attention)):
            for i, layer in enumerate(cache.layers):
                self.register_buffer(f"{kind}_key_cache_{i}", layer.keys, persistent=False)
                self.register_buffer(f"{kind}_value_cache_{i}", layer.values, persistent=False)
                self.register_buffer(f"{kind}_cumulative_length_{i}", layer.cumulative_length, persistent=False)
        self.cache = EncoderDecoderCache(self.self_attention, self.cross_attention)

    def forward(self, decoder_input_ids, encoder_hidden_states, cache_position):
        for layer in self.self_attention.layers:
            layer.cumulative_length.copy_(cache_position[0])
        for layer in self.cross_attention.layers:  # the encoder's states are written from position 0 each call
            layer.cumulative_length.zero_()
        hidden = self.decoder(input_ids=decoder_input_ids, encoder_hidden_states=encoder_hidden_states,
                              cache=self.cache, use_cache=True)[0]
        return self.proj_out(hidden)


class _Argmax(torch.nn.Module):
    def forward(self, logits):
        return torch.argmax(logits, dim=-1)


def _export(path: Path) -> dict:
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower
    from torch.nn.attention import SDPBackend, sdpa_kernel

    model = tiny_whisper()
    config = model.config
    with torch.random.fork_rng(), torch.no_grad():
        torch.manual_seed(0)
        features = torch.rand(1, config.num_mel_bins, 2 * config.max_source_positions)
        encoder = torch.export.export(_Encoder(model.get_encoder()).eval(), (features,), strict=True)
        states = encoder.module()(features)
        with sdpa_kernel([SDPBackend.MATH]):
            decoder = torch.export.export(_Decoder(model, MAX_SEQ_LEN).eval(),
                                          (torch.tensor([[0]]), states, torch.tensor([0])), strict=True)
        sampler = torch.export.export(_Argmax(), (torch.randn(1, 1, VOCAB),), strict=True)
    # save_config_to_constant_methods(config, get_max_seq_len=...): its keys, the ones that are not None.
    metadata = {
        "get_dtype": 6, "get_bos_id": config.bos_token_id, "get_eos_id": config.eos_token_id,
        "get_head_dim": config.hidden_size / config.num_attention_heads, "get_n_layers": config.num_hidden_layers,
        "get_vocab_size": config.vocab_size, "get_max_batch_size": 1, "get_max_seq_len": MAX_SEQ_LEN,
        "decoder_start_token_id": config.decoder_start_token_id, "use_sdpa_with_kv_cache": False,
        "enable_dynamic_shape": True,
    }
    edge = to_edge_transform_and_lower(
        {"encoder": encoder, "text_decoder": decoder, "sampler": sampler}, partitioner=[],
        compile_config=EdgeCompileConfig(_check_ir_validity=False, _skip_dim_order=True), constant_methods=metadata,
    )
    path.write_bytes(edge.to_executorch().buffer)
    return metadata


def clip(seconds: float, seed: int) -> torch.Tensor:
    """Gliding tones over noise: float32 samples at 16 kHz in [-1, 1], different for every seed."""
    generator = torch.Generator().manual_seed(seed)
    t = torch.arange(int(seconds * 16000), dtype=torch.float64) / 16000
    base = 150.0 + 60.0 * seed
    pitch = base * (1.0 + 0.3 * torch.sin(2 * torch.pi * 0.5 * t))
    phase = 2 * torch.pi * torch.cumsum(pitch, 0) / 16000
    envelope = 0.5 + 0.5 * torch.sin(2 * torch.pi * (1.0 + 0.2 * seed) * t) ** 2
    tone = 0.3 * envelope * (torch.sin(phase) + 0.4 * torch.sin(2 * phase))
    noise = 0.05 * torch.randn(t.shape, generator=generator, dtype=torch.float64)
    return (tone + noise).to(torch.float32)
