"""The model's metadata, from the constant methods ExecuTorch's LLM export writes (llm_runner_helper.cpp)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import overload

from pterun.errors import InvalidProgram

MAX_SEQ_LEN = "get_max_seq_len"
MAX_CONTEXT_LEN = "get_max_context_len"
VOCAB_SIZE = "get_vocab_size"
BOS_ID = "get_bos_id"
EOS_IDS = "get_eos_ids"
USE_KV_CACHE = "use_kv_cache"
USE_SDPA_WITH_KV_CACHE = "use_sdpa_with_kv_cache"
ENABLE_DYNAMIC_SHAPE = "enable_dynamic_shape"

# ExecuTorch's defaults for a method the program does not have.
_DEFAULTS = {ENABLE_DYNAMIC_SHAPE: False, MAX_SEQ_LEN: 128, MAX_CONTEXT_LEN: 128, USE_KV_CACHE: True,
             USE_SDPA_WITH_KV_CACHE: False}


@dataclass(frozen=True)
class LlmMetadata:
    max_seq_len: int
    max_context_len: int
    use_kv_cache: bool
    use_sdpa_with_kv_cache: bool
    enable_dynamic_shape: bool
    vocab_size: int | None  # the program's get_vocab_size, where it has one
    bos_id: int | None  # the program's get_bos_id (ExecuTorch's runner uses the tokenizer's BOS)
    eos_ids: tuple[int, ...] | None  # the program's get_eos_ids, which replace the tokenizer's EOS


def _value(program, name: str):
    values = program.load_method(name, cached=False).execute([])
    return values[0] if len(values) == 1 else values


def _scalar(value) -> int:
    return int(value.item() if hasattr(value, "item") else value)


@overload
def constant_int(program, name: str, default: int) -> int: ...


@overload
def constant_int(program, name: str, default: None = None) -> int | None: ...


def constant_int(program, name: str, default: int | None = None) -> int | None:
    """The program's constant method ``name`` as an int (the exporter writes metadata so), else ``default``."""
    return _scalar(_value(program, name)) if name in program.method_names else default


def constant_floats(program, name: str) -> list[float] | None:
    """The program's constant method ``name`` as floats (one value, or a list of them), None where it has none."""
    if name not in program.method_names:
        return None
    values = program.load_method(name, cached=False).execute([])
    return [float(v) for value in values
            for v in (value.reshape(-1).tolist() if hasattr(value, "reshape") else [value])]


def read_metadata(program) -> LlmMetadata:
    names = program.method_names
    if MAX_SEQ_LEN not in names:
        raise InvalidProgram(
            f"Required metadata method {MAX_SEQ_LEN} not found in model: expected the constant methods "
            f"ExecuTorch's LLM export writes, found methods {sorted(names)}"
        )
    values = {name: constant_int(program, name, default) for name, default in _DEFAULTS.items()}
    if MAX_CONTEXT_LEN not in names:
        values[MAX_CONTEXT_LEN] = values[MAX_SEQ_LEN]
    eos = None
    if EOS_IDS in names:
        found = program.load_method(EOS_IDS, cached=False).execute([])
        # One value per id, or the ids as one tensor.
        eos = tuple(int(i) for v in found for i in (v.reshape(-1).tolist() if hasattr(v, "reshape") else [v]))
    return LlmMetadata(
        max_seq_len=values[MAX_SEQ_LEN], max_context_len=values[MAX_CONTEXT_LEN],
        use_kv_cache=bool(values[USE_KV_CACHE]), use_sdpa_with_kv_cache=bool(values[USE_SDPA_WITH_KV_CACHE]),
        enable_dynamic_shape=bool(values[ENABLE_DYNAMIC_SHAPE]),
        vocab_size=constant_int(program, VOCAB_SIZE),
        bos_id=constant_int(program, BOS_ID),
        eos_ids=eos,
    )
