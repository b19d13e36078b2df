"""One float program exercising most XNNPACK node types, against ExecuTorch's XNNPACK.

The model strings together the activations, binary ops, pooling, resizing,
transposed and grouped convolutions, slicing, padding and concatenation that
XnnpackPartitioner lowers, so each node translator runs on real blob data.
"""

from __future__ import annotations

import pterun
from tests.backends.xnnpack.programs import ZOO_NODES, assert_relative, export_zoo, node_kinds, zoo_inputs
from tests.support.oracle import run_reference


def test_node_zoo_matches_executorch_xnnpack():
    exported = export_zoo()
    kinds = set(node_kinds(exported.pte))
    assert ZOO_NODES <= kinds, f"the delegates lack {sorted(ZOO_NODES - kinds)}"
    method = pterun.Runtime.get().load_program(exported.pte).load_method("forward")
    for seed in (1, 2):
        args = zoo_inputs(seed)
        actual = method.execute(args)
        expected = run_reference(exported.pte, args)
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_relative(a, e, 1e-4, f"seed {seed} output {i}")
