"""Next-token sampling as ExecuTorch's Sampler does it (extension/llm/sampler/sampler.cpp).

Greedy is the first largest logit. With a temperature, the logits are scaled, softmaxed and
sampled by top-p 0.9 with a coin from the same xorshift64* generator ExecuTorch uses, seeded
the same way (the time in seconds) unless a seed is given. The arithmetic is float32 and
sequential as in ExecuTorch's loops; for float32 logits the same seed gives the same tokens
but where ``expf`` and NumPy's ``exp`` round an element differently or two probabilities tie
in the sort. Half-precision logits are sampled in float32 (ExecuTorch computes in their type).
"""

from __future__ import annotations

import time

import numpy as np
import torch

TOPP = 0.9  # ExecuTorch's kTopp
_MASK64 = (1 << 64) - 1


class Sampler:
    def __init__(self, vocab_size: int, temperature: float = 0.0, *, topp: float = TOPP,
                 seed: int | None = None) -> None:
        self.vocab_size = vocab_size
        self.topp = np.float32(topp)
        self.rng_state = (int(time.time()) if seed is None else int(seed)) & _MASK64
        self.set_temperature(temperature)

    def set_temperature(self, temperature: float) -> None:
        temperature = max(float(temperature), 0.0)
        self.inv_temperature = np.float32(1.0) / np.float32(temperature) if temperature else np.float32(0.0)

    def random_u32(self) -> int:
        state = self.rng_state
        state ^= state >> 12
        state ^= (state << 25) & _MASK64
        state ^= state >> 27
        self.rng_state = state
        return ((state * 0x2545F4914F6CDD1D) & _MASK64) >> 32

    def random_f32(self) -> np.float32:
        return np.float32((self.random_u32() >> 8) / 16777216.0)

    def sample(self, logits: torch.Tensor) -> int:
        """The next token from one row of logits (its first ``vocab_size`` entries)."""
        row = logits[: self.vocab_size]
        if self.inv_temperature == 0:
            return int(torch.argmax(row))
        x = row.detach().to("cpu", torch.float32).numpy() * self.inv_temperature
        x = np.exp(x - x.max(), dtype=np.float32)
        x /= np.add.accumulate(x)[-1]  # sequential, as ExecuTorch's loop sums
        coin = self.random_f32()
        if self.topp <= 0 or self.topp >= 1:
            return _pick(x, coin)
        return self._top_p(x, coin)

    def _top_p(self, probs: np.ndarray, coin: np.float32) -> int:
        n = len(probs)
        cutoff = (np.float32(1.0) - self.topp) / np.float32(n - 1)
        kept = np.flatnonzero(probs >= cutoff)
        kept = kept[np.argsort(-probs[kept], kind="stable")]
        cumulative = np.add.accumulate(probs[kept])
        over = np.flatnonzero(cumulative > self.topp)
        last = int(over[0]) if len(over) else len(kept) - 1
        r = np.float32(coin * cumulative[last])
        return int(kept[_pick(probs[kept[: last + 1]], r)])


def _pick(probs: np.ndarray, coin: np.float32) -> int:
    """The first index whose running sum exceeds the coin (the last one for rounding's sake)."""
    hits = np.flatnonzero(coin < np.add.accumulate(probs))
    return int(hits[0]) if len(hits) else len(probs) - 1
