"""The method names ExecuTorch's LLM runners look for in a program (extension/llm/runner/constants.h)."""

# Text: a single-method program has "forward"; a two-method one "prefill" and "decode".
FORWARD = "forward"
PREFILL = "prefill"
DECODE = "decode"

# Multimodal: tokens to embeddings, embeddings (and positions) to logits, and the encoders of other inputs.
TOKEN_EMBEDDING = "token_embedding"
TEXT_DECODER = "text_decoder"
VISION_ENCODER = "vision_encoder"
AUDIO_ENCODER = "audio_encoder"
ENCODERS = {"image": VISION_ENCODER, "audio": AUDIO_ENCODER}
