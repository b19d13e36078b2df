"""The programs every malformed-input test mutates, and the worker that reads the mutated files.

Both are made once for the whole directory: the worker first runs every
program unmodified, and at the end runs them again, after it has read every
mutated file of every test here.
"""

from __future__ import annotations

import pytest

from tests.executor.malformed.dense import dense_data_file, dense_program
from tests.executor.malformed.subjects import Subject, assert_same, subject
from tests.support.malformed_worker import Worker


@pytest.fixture(scope="package")
def subjects() -> dict[str, Subject]:
    from tests.backends.xnnpack.programs import export_model, export_quantized
    from tests.format import programs

    xnn_linear, xnn_q8 = export_model("et_toy_linear"), export_quantized("mlp", "per-tensor")
    stateful, external = programs.stateful(), programs.external()
    sin_segment, sin_inline = programs.delegated(inline=False), programs.delegated(inline=True)
    train = programs.trainable_external()
    inline = programs.inline_constants().read_bytes()
    ext_ptd, train_ptd = external.ptd[0].read_bytes(), train.ptd[0].read_bytes()
    made = [
        # Two methods, a constant segment, a mutable data segment with initial values.
        subject("stateful", stateful.pte.read_bytes(), [], stateful.inputs),
        subject("stateful-dense", dense_program(stateful.pte.read_bytes()), [], stateful.inputs),
        # A delegate blob in a segment, another inline; named data for the delegate in the program.
        subject("sin-segment", sin_segment.pte.read_bytes(), [], sin_segment.inputs),
        subject("sin-inline-dense", dense_program(sin_inline.pte.read_bytes()), [], sin_inline.inputs),
        # The deprecated inline constant buffers, no extended header.
        subject("inline-constants", inline, [], programs.affine().inputs),
        # Constants in a .ptd file.
        subject("external", external.pte.read_bytes(), [ext_ptd], external.inputs),
        subject("external-dense", dense_program(external.pte.read_bytes()), [dense_data_file(ext_ptd)],
                 external.inputs),
        # Memory-planned tensors whose initial values are in a .ptd file.
        subject("train-dense", dense_program(train.pte.read_bytes()), [dense_data_file(train_ptd)], train.inputs),
        # XNNPACK blobs: a float linear layer with its weights, an 8-bit MLP (convert nodes, scales).
        subject("xnnpack-linear", xnn_linear.pte.read_bytes(), [], xnn_linear.inputs),
        subject("xnnpack-q8-dense", dense_program(xnn_q8.pte.read_bytes()), [], xnn_q8.inputs),
    ]
    return {s.name: s for s in made}


@pytest.fixture(scope="package")
def worker(subjects):
    w = Worker()
    originals = {name: (s.pte, tuple(s.ptd)) for name, s in subjects.items()}
    try:
        for s in subjects.values():
            reply = w.ask({"pte": s.pte, "ptd": s.ptd, "inputs": s.inputs, "levels": [0, 1]}, timeout=300)
            for outcome in reply["outcomes"]:
                assert outcome[0] == "ok", f"{s.name} does not run unmodified: {outcome}"
                for name, result in outcome[1].items():
                    assert not isinstance(result, tuple), f"{s.name} method {name} fails unmodified: {result}"
            s.baseline = reply["outcomes"][0]
        yield w
        # Mutations were made on copies, and the unmodified programs still load and give the same
        # outputs in the worker that read every mutated file.
        for s in subjects.values():
            assert (s.pte, tuple(s.ptd)) == originals[s.name]
            reply = w.ask({"pte": s.pte, "ptd": s.ptd, "inputs": s.inputs, "levels": [0, 1]}, timeout=300)
            for outcome in reply["outcomes"]:
                assert_same(s, outcome)
    finally:
        w.close()
