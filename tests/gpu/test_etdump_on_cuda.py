"""ETDump on a CUDA device: spans from CUDA events, values copied from the device, graphs kept when it is off, and an
XNNPACK delegate's nodes timed on the GPU. ETDump's home is tests/executor/test_etdump.py."""

from __future__ import annotations

import pytest
import torch

import pterun
from pterun.format import DelegateCall, KernelCall
from pterun.format.etdump import DebugEvent, ProfileEvent, read_etdump
from tests.backends.xnnpack.programs import export_model, export_quantized, quantized_inputs
from tests.gpu.conftest import FIXTURES, load_fixture, on
from tests.support.compare import assert_matches
from tests.support.differential import flat

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


@pytest.mark.parametrize("name", ["resnet", "q-convnet-per-channel"])
def test_profiled_xnnpack_on_cuda_reports_every_node_with_gpu_times(tmp_path, name):
    exported = export_model("resnet") if name == "resnet" else export_quantized("convnet", "per-channel")
    args = flat(exported.forward_inputs()) if name == "resnet" else list(quantized_inputs("convnet", 1, 1.0))
    plain = pterun.Runtime.get().load_program(exported.pte, device="cuda").load_method("forward")
    program = pterun.Runtime.get().load_program(exported.pte, device="cuda", enable_etdump=True,
                                                debug_buffer_size=256 << 20)
    traced = program.load_method("forward")
    expected, actual = plain.execute([a.cuda() for a in args]), traced.execute([a.cuda() for a in args])
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e, rtol=0, atol=0)
    program.write_etdump_result_to_file(tmp_path / "run.etdp", tmp_path / "run.bin")
    events = read_etdump((tmp_path / "run.etdp").read_bytes())[-1].events
    calls = [e for e in events if isinstance(e, ProfileEvent) and e.name == "DELEGATE_CALL"]
    nodes = [e for e in events if isinstance(e, ProfileEvent) and e.name is None]
    assert calls and len(nodes) >= 3 * len(calls), "the delegates' nodes were not reported"
    for node in nodes:
        (call,) = [c for c in calls if c.instruction == node.instruction]
        assert call.start <= node.start <= node.end <= call.end
    assert sum(n.end - n.start for n in nodes) > 0, "CUDA events measured nothing"
    assert any(isinstance(e, DebugEvent) and (e.delegate_id >= 0 or e.delegate_name) for e in events)
