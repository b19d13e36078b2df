"""Text generation from exported LLMs: a drop-in for executorch.extension.llm.runner (docs/llm.md)."""

from pterun.llm.config import GenerationConfig
from pterun.llm.runner import TextLLMRunner
from pterun.llm.stats import Stats
from pterun.llm.tokenizer import Tokenizer

__all__ = ["GenerationConfig", "Stats", "TextLLMRunner", "Tokenizer"]
