"""transformers language models (and CLIP) with random weights and small configs, against ExecuTorch.

Each model is exported through both lowerings and run on two different inputs
through one loaded method. The ``*_dynamic`` variants are exported with a
bounded dynamic sequence length and called at several lengths, the bound and a
single token included.
"""

from __future__ import annotations

import pytest

from pterun.format import Dynamism, ProgramFile
from tests.support.differential import check, check_model, export_model, load, lowerings
from tests.support.models import SEQ_LENGTHS, build

LANGUAGE_MODELS = ["llama", "qwen3", "stablelm", "gpt2", "bert", "distilbert", "t5", "deberta_v2", "mamba", "clip"]


@lowerings
@pytest.mark.parametrize("name", LANGUAGE_MODELS)
def test_language_model(name, lower):
    check_model(name, lower)


@lowerings
@pytest.mark.parametrize("name", ["llama_dynamic", "bert_dynamic", "gpt2_dynamic"])
def test_language_model_dynamic_length(name, lower):
    exported = export_model(name, lower)
    plan = ProgramFile(exported.pte).plan("forward")
    for index in plan.inputs:
        spec = plan.values[index]
        assert spec.dynamism == Dynamism.DYNAMIC_BOUND, f"input {index} is not dynamic"
        assert spec.sizes[1] == 32
    program = load(exported)
    make_inputs = build(name).make_inputs
    lengths = set()
    for seed in range(len(SEQ_LENGTHS)):
        inputs = make_inputs(seed)
        lengths.add(inputs[0].shape[1])
        check(exported, inputs, program=program)
    assert {1, 32} <= lengths
