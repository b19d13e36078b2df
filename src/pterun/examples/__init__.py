"""Programs that ship with pterun: llama_tiny.pte (made by scripts/make-example.py), and llm_tiny.pte with
its llm_tiny.tokenizer.json, a language model from ExecuTorch's LLM export (scripts/make-llm-example.py)."""
