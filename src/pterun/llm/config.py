"""GenerationConfig: how one generate() call runs (ExecuTorch's irunner.h, field for field)."""

from __future__ import annotations

import struct


def _float32(value: float) -> float:
    """The value as C++'s ``float`` holds it, so a field reads back what ExecuTorch's would."""
    return struct.unpack("f", struct.pack("f", float(value)))[0]


class GenerationConfig:
    """Same fields, defaults and ``resolve_max_new_tokens`` as ExecuTorch's ``GenerationConfig``."""

    __slots__ = ("echo", "max_new_tokens", "warming", "seq_len", "_temperature", "num_bos", "num_eos")

    def __init__(self, *, echo: bool = True, max_new_tokens: int = -1, warming: bool = False,
                 seq_len: int = -1, temperature: float = 0.8, num_bos: int = 0, num_eos: int = 0) -> None:
        self.echo = bool(echo)
        self.max_new_tokens = int(max_new_tokens)
        self.warming = bool(warming)
        self.seq_len = int(seq_len)
        self.temperature = temperature
        self.num_bos = int(num_bos)
        self.num_eos = int(num_eos)

    @property
    def temperature(self) -> float:
        return self._temperature

    @temperature.setter
    def temperature(self, value: float) -> None:
        self._temperature = _float32(value)

    def resolve_max_new_tokens(self, max_context_len: int, num_tokens_occupied: int) -> int:
        """How many tokens may still be generated: ``seq_len`` caps the total, ``max_new_tokens`` the new
        ones, the context what is left after ``num_tokens_occupied`` positions; never below 0."""
        room = max_context_len - num_tokens_occupied
        if self.seq_len == -1 and self.max_new_tokens == -1:
            result = room
        elif self.seq_len == -1:
            result = min(self.max_new_tokens, room)
        elif self.max_new_tokens == -1:
            result = min(self.seq_len, max_context_len) - num_tokens_occupied
        else:
            result = min(min(self.seq_len, max_context_len) - num_tokens_occupied, self.max_new_tokens)
        return max(0, result)

    def __repr__(self) -> str:
        return (f"<GenerationConfig max_new_tokens={self.max_new_tokens} seq_len={self.seq_len} "
                f"temperature={self.temperature:f} echo={self.echo} warming={self.warming}>")
