"""transformers vision models (random weights, small configs) against ExecuTorch's runtime.

Channels-last inputs are covered in test_program_outputs.py with a hand-made block: these models
cannot run channels-last on ExecuTorch's portable kernels (its batch norm and permute_copy take
contiguous tensors only, and refuse mixed dim orders).
"""

from __future__ import annotations

import pytest

from tests.support.differential import check_model, lowerings


@lowerings
@pytest.mark.parametrize("name", ["vit", "mobilenet_v2", "resnet", "convnext", "swin", "segformer"])
def test_vision_model(name, lower):
    check_model(name, lower)
