"""Registered models again, exported with dynamic sequence lengths."""

from __future__ import annotations

import torch

from tests.support.models.examples import KVStep, llama_transformer
from tests.support.models.language import bert, gpt2, llama
from tests.support.models.registry import VOCAB, Model, builder, tokens

# Sequence lengths by input seed: seed 0 (the export example) first, then shorter, the bound, and one.
SEQ_LENGTHS = (12, 5, 32, 1, 17)


def _seq_dim(name: str = "seq"):
    from torch.export import Dim

    return Dim(name, min=1, max=32)


def _seq_tokens(batch: int):
    return lambda seed: (tokens(seed, VOCAB, batch, SEQ_LENGTHS[seed % len(SEQ_LENGTHS)]),)


@builder("llama_dynamic")
def llama_dynamic() -> Model:
    """The Llama above with a sequence length anywhere up to 32 tokens."""
    model = llama()
    model.make_inputs = _seq_tokens(1)
    model.dynamic_shapes = (({1: _seq_dim()},),)  # Field takes *args: one tuple
    return model


@builder("bert_dynamic")
def bert_dynamic() -> Model:
    """The BERT above with a dynamic sequence length (and its padding mask and token types with it)."""
    model = bert()

    def inputs(seed: int) -> tuple:
        n = SEQ_LENGTHS[seed % len(SEQ_LENGTHS)]
        ids = tokens(seed, VOCAB, 2, n)
        mask = torch.ones(2, n, dtype=torch.long)
        mask[1, max(1, n // 2) :] = 0
        types = torch.zeros(2, n, dtype=torch.long)
        types[:, n // 3 :] = 1
        return ids, mask, types

    seq = _seq_dim()
    model.make_inputs = inputs
    model.dynamic_shapes = (({1: seq}, {1: seq}, {1: seq}),)
    return model


@builder("gpt2_dynamic")
def gpt2_dynamic() -> Model:
    """The GPT-2 above with a dynamic sequence length (positions up to its 32).

    The batch stays static: ExecuTorch 1.5.1 plans a dynamic batch of this model at the example's
    size (its input's upper bound comes out as (2, 32) for a batch Dim of max 4), and its runtime
    then refuses any other batch size.
    """
    model = gpt2()
    model.make_inputs = _seq_tokens(2)
    model.dynamic_shapes = (({1: _seq_dim()},),)
    return model


@builder("et_llama_kv_dynamic")
def et_llama_kv_dynamic() -> Model:
    """The KV-cached Llama example taking any number of new tokens: a prompt at once, then one by one."""
    from torch.export import Dim

    model = Model(
        KVStep(llama_transformer(use_kv_cache=True, enable_dynamic_shape=True)),
        lambda seed: (tokens(seed, VOCAB, 1, 5 + seed), torch.tensor([0], dtype=torch.long)),
    )
    model.dynamic_shapes = ({1: Dim("seq", min=1, max=16)}, None)
    return model
