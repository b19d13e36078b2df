"""Stats: what one generate() call measured, in ExecuTorch's fields and JSON (llm/runner/stats.h)."""

from __future__ import annotations

import time


def time_in_ms() -> int:
    """Wall-clock milliseconds, the clock ExecuTorch's runner stamps its Stats with."""
    return time.time_ns() // 1_000_000


_JSON_TIMES = (
    "model_load_start_ms", "model_load_end_ms", "inference_start_ms", "inference_end_ms",
    "model_execution_start_ms", "model_execution_end_ms", "prompt_eval_end_ms", "first_token_ms",
    "aggregate_sampling_time_ms", "aggregate_model_execution_time_ms",
)


def _number(value: float) -> str:
    """A double as C++'s default stream formatting writes it (%g, six significant digits)."""
    return format(value, ".6g")


class Stats:
    """ExecuTorch's ``Stats``, constructible and writable from Python (ExecuTorch's are read-only)."""

    SCALING_FACTOR_UNITS_PER_SECOND = 1000

    # ExecuTorch's fields (milliseconds of time_in_ms(), and token counts), 0 until measured.
    model_load_start_ms: int
    model_load_end_ms: int
    inference_start_ms: int
    token_encode_end_ms: int
    model_execution_start_ms: int
    model_execution_end_ms: int
    prompt_eval_end_ms: int
    first_token_ms: int
    inference_end_ms: int
    aggregate_sampling_time_ms: int
    aggregate_model_execution_time_ms: int
    num_prompt_tokens: int
    num_generated_tokens: int
    # Device memory, reported only where it was measured (None: not measured; ExecuTorch keeps uint64 -1).
    gpu_total_bytes: int | None
    gpu_free_before_load_bytes: int | None
    gpu_free_after_load_bytes: int | None
    gpu_free_after_generate_bytes: int | None
    gpu_peak_usage_mb: float | None

    def __init__(self, **values: int) -> None:
        for name in _FIELDS:
            setattr(self, name, 0)
        for name in _GPU_FIELDS:
            setattr(self, name, None)
        self._sampling_start = 0
        for name, value in values.items():
            if name not in _FIELDS and name not in _GPU_FIELDS:
                raise TypeError(f"Stats has no field {name!r}")
            setattr(self, name, value)

    def on_sampling_begin(self) -> None:
        self._sampling_start = time_in_ms()

    def on_sampling_end(self) -> None:
        self.aggregate_sampling_time_ms += time_in_ms() - self._sampling_start
        self._sampling_start = 0

    def on_model_execution_begin(self) -> None:
        self.model_execution_start_ms = time_in_ms()

    def on_model_execution_end(self) -> None:
        self.model_execution_end_ms = time_in_ms()
        self.aggregate_model_execution_time_ms += self.model_execution_end_ms - self.model_execution_start_ms

    def reset(self, all_stats: bool = False) -> None:
        """Zeroes the figures of a generation; ``all_stats`` the model-load times too."""
        keep: tuple[str, ...] = ("model_load_start_ms", "model_load_end_ms", "token_encode_end_ms")
        if all_stats:
            keep = ("token_encode_end_ms",)
        for name in _FIELDS:
            if name not in keep:
                setattr(self, name, 0)
        for name in _GPU_FIELDS:
            setattr(self, name, None)
        self._sampling_start = 0

    def to_json_string(self) -> str:
        """The JSON ExecuTorch's ``stats_to_json_string`` writes, key for key and in its order."""
        parts = []
        prefill_ms = float(self.prompt_eval_end_ms - self.inference_start_ms)
        if prefill_ms > 0:
            rate = self.num_prompt_tokens / prefill_ms * self.SCALING_FACTOR_UNITS_PER_SECOND
            parts.append(f'"prefill_token_per_sec":{_number(rate)}')
        decode_ms = float(self.inference_end_ms - self.prompt_eval_end_ms)
        if decode_ms > 0:
            rate = self.num_generated_tokens / decode_ms * self.SCALING_FACTOR_UNITS_PER_SECOND
            parts.append(f'"decode_token_per_sec":{_number(rate)}')
        parts.append(f'"prompt_tokens":{self.num_prompt_tokens}')
        parts.append(f'"generated_tokens":{self.num_generated_tokens}')
        for name in _JSON_TIMES:
            parts.append(f'"{name}":{getattr(self, name)}')
        if self.gpu_total_bytes is not None:
            parts.append(f'"gpu_total_bytes":{self.gpu_total_bytes}')
            for name in _GPU_FIELDS[1:4]:
                if getattr(self, name) is not None:
                    parts.append(f'"{name}":{getattr(self, name)}')
            if self.gpu_peak_usage_mb is not None and self.gpu_peak_usage_mb >= 0:
                parts.append(f'"gpu_peak_usage_mb":{_number(self.gpu_peak_usage_mb)}')
        parts.append(f'"SCALING_FACTOR_UNITS_PER_SECOND":{self.SCALING_FACTOR_UNITS_PER_SECOND}')
        return "{" + ",".join(parts) + "}"

    def __repr__(self) -> str:
        elapsed = self.inference_end_ms - self.inference_start_ms
        rate = self.num_generated_tokens * self.SCALING_FACTOR_UNITS_PER_SECOND / elapsed if elapsed > 0 \
            else 0.0
        return (f"<Stats num_prompt_tokens={self.num_prompt_tokens} "
                f"num_generated_tokens={self.num_generated_tokens} tokens_per_second={rate:f}>")


_GPU_FIELDS = tuple(name for name in Stats.__annotations__ if name.startswith("gpu_"))
_FIELDS = tuple(name for name in Stats.__annotations__ if name.endswith(("_ms", "_tokens")))
