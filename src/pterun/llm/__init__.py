"""Text generation from exported LLMs, from text or from text, images and audio: a drop-in for
executorch.extension.llm.runner (docs/llm.md)."""

from pterun.llm.config import GenerationConfig
from pterun.llm.hf import generate_hf, generate_text_hf
from pterun.llm.multimodal_input import (
    Audio,
    Image,
    MultimodalInput,
    RawAudio,
    make_audio_input,
    make_image_input,
    make_raw_audio_input,
    make_text_input,
    make_token_input,
)
from pterun.llm.multimodal_runner import MultimodalRunner
from pterun.llm.runner import TextLLMRunner
from pterun.llm.stats import Stats
from pterun.llm.tokenizer import Tokenizer

__all__ = [
    "Audio", "GenerationConfig", "Image", "MultimodalInput", "MultimodalRunner", "RawAudio", "Stats", "TextLLMRunner",
    "Tokenizer", "generate_hf", "generate_text_hf", "make_audio_input", "make_image_input", "make_raw_audio_input",
    "make_text_input", "make_token_input",
]
