"""ETDump on a CUDA device: spans from CUDA events, values copied from the device, graphs kept when it is off."""

from __future__ import annotations

import pytest
import torch

import pterun
from pterun.format import DelegateCall, KernelCall
from pterun.format.etdump import DebugEvent, ProfileEvent, read_etdump
from tests.gpu.conftest import FIXTURES, load_fixture, on
from tests.support.compare import assert_matches

pytestmark = pytest.mark.gpu

CALLS = ("OPERATOR_CALL", "DELEGATE_CALL")


@pytest.mark.parametrize("name", ["et_ds_cnn", "et_toy_sdpa", "gpt2"])
def test_a_profiled_run_on_cuda_times_every_instruction_and_logs_its_values(tmp_path, name):
    pte, ptd, calls, expected = load_fixture(FIXTURES / "corpus" / name)
    program = pterun.Runtime.get().load_program(pte, device="cuda", data_path=ptd or None, enable_etdump=True,
                                                debug_buffer_size=256 << 20)
    method = program.load_method("forward")
    assert method.cuda_graph is None, "a profiled method runs kernel by kernel"
    outputs = method.execute(on("cuda", calls[0]))
    assert_matches(on("cpu", outputs), expected[0], rtol=2e-4)
    program.write_etdump_result_to_file(tmp_path / "run.etdp", tmp_path / "run.bin")
    block = read_etdump((tmp_path / "run.etdp").read_bytes())[-1]
    assert block.name == "Execute"
    spans = [e for e in block.events if isinstance(e, ProfileEvent) and e.name in CALLS]
    instructions = [i for i in method.plan.instructions if isinstance(i, (KernelCall, DelegateCall))]
    assert len(spans) == len(instructions)
    (whole,) = [e for e in block.events if isinstance(e, ProfileEvent) and e.name == "Method::execute"]
    assert all(whole.start <= e.start <= e.end <= whole.end for e in spans)
    assert sum(e.end - e.start for e in spans) <= whole.end - whole.start
    assert any(e.end > e.start for e in spans), "CUDA events measured nothing"
    logged = [e for e in block.events if isinstance(e, DebugEvent) and e.output]
    first = logged[0].value
    debug = (tmp_path / "run.bin").read_bytes()
    dtype = outputs[0].dtype
    values = torch.frombuffer(bytearray(debug[first.offset: first.offset + outputs[0].numel() * dtype.itemsize]),
                              dtype=dtype).as_strided(first.sizes, first.strides)
    torch.testing.assert_close(values, outputs[0].cpu(), rtol=0, atol=0)


def test_the_same_program_without_etdump_still_replays_a_graph():
    pte, ptd, calls, expected = load_fixture(FIXTURES / "corpus" / "et_ds_cnn")
    method = pterun.Runtime.get().load_program(pte, device="cuda").load_method("forward")
    for _ in range(3):
        outputs = method.execute(on("cuda", calls[0]))
    assert method.cuda_graph is not None and method.cuda_graph.replaying
    assert "_now" not in method.source
    assert_matches(on("cpu", outputs), expected[0], rtol=2e-4)
