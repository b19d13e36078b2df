"""Profiling inside VulkanBackend delegates: ``WebGPUBackend.profiled`` runs the compiled program node by
node for a DelegateTracer, on programs lowered with ExecuTorch's WebGPUPartitioner."""

from __future__ import annotations

import itertools
import time

import pytest
import torch

import pterun
from pterun.backends.webgpu import FUSE_SWIGLU, GPU_TIMESTAMPS, NAME, WebGPUBackend, WebGPUDelegate, device
from pterun.backends.webgpu.outputs import TORCH_DTYPE
from pterun.backends.webgpu.profile import on_clock
from pterun.errors import DelegateInvalidHandle
from pterun.format import ProgramFile
from tests.backends.webgpu.adapter import needs_adapter
from tests.backends.webgpu.crafted import Craft
from tests.backends.webgpu.programs import RTOL, delegates, export, graphs, model
from tests.support.compare import assert_matches

pytestmark = needs_adapter

FUSED = "silu_mul_fused(aten.sigmoid.default, aten.mul.Tensor, aten.mul.Tensor)"


class Tracer:
    """A DelegateTracer that keeps what it is told; its clock is ``clock`` (perf_counter_ns by default)."""

    def __init__(self, logs_values: bool, clock=time.perf_counter_ns) -> None:
        self.logs_values = logs_values
        self.clock = clock
        self.reports: list[dict] = []

    def now(self):
        return self.clock()

    def node(self, start, end, *, debug_handle=-1, name=None, outputs=()):
        self.reports.append(
            {"start": start, "end": end, "handle": debug_handle, "name": name, "outputs": list(outputs)}
        )


def load(name: str, **options):
    lowered = export(name, True)
    plan = ProgramFile(lowered.pte).plan("forward")
    # The premise: the whole program is one VulkanBackend delegate (nothing runs outside it).
    assert [d.backend_id for d in plan.delegates] == [NAME] and not plan.operators
    method = (
        pterun.Runtime.get().load_program(lowered.pte, backend_options={NAME: options}).load_method("forward")
    )
    (delegate,) = delegates(method)
    (graph,) = graphs(lowered.pte)
    delegate.method = method  # the method destroys its delegates when it is dropped
    return delegate, graph


def call(fn, inputs) -> list:
    """Calls a delegate (or its profiled execute) as the executor does: inputs, then outputs it resizes."""
    args = [*inputs, torch.empty(0)]
    fn(args)
    return args


def check_times(reports, before, after) -> None:
    times = [t for r in reports for t in (r["start"], r["end"])]
    assert times == sorted(times), "node times are not in order"
    assert before <= times[0] and times[-1] <= after, "node times fall outside the call"


@pytest.mark.parametrize("stamps", [True, False], ids=["gpu-timestamps", "host-waits"])
@pytest.mark.parametrize("name", ["convnet", "swiglu"])
def test_reports_every_node_in_order_and_computes_what_execute_does(name, stamps):
    delegate, blob = load(name, **{GPU_TIMESTAMPS: stamps})
    tracer = Tracer(logs_values=True)
    run = WebGPUBackend().profiled(delegate, tracer)
    assert run.uses_gpu_timestamps == stamps
    if stamps:
        assert device.gpu().timestamps, "lavapipe offers timestamp-query; this adapter does not"
    _, inputs, _ = model(name)
    for seed in range(2):
        x = list(inputs(seed))
        expected = call(delegate, x)
        tracer.reports.clear()
        before = time.perf_counter_ns()
        got = call(run, x)
        after = time.perf_counter_ns()
        assert torch.equal(got[-1], expected[-1])

        # One report per operator of the blob, in its order, each with the operator's debug identifier;
        # the SwiGLU the loader fused reports once, with the identifier of the multiply it ends with.
        ops = [(op.node_id, op.name) for op in blob.chain]
        if name == "swiglu":
            assert delegate.fused_swiglu == 1
            (s,) = [i for i, (_, n) in enumerate(ops) if n == "aten.sigmoid.default"]
            ops = ops[:s] + ops[s + 2 :]
            (f,) = [i for i, (_, n) in enumerate(ops) if n == "aten.mul.Tensor"]
            ops[f] = (ops[f][0], FUSED)
        assert [(r["handle"], r["name"]) for r in tracer.reports] == ops
        assert len({h for h, _ in ops}) == len(ops) and min(h for h, _ in ops) >= 0
        check_times(tracer.reports, before, after)
        # Every node logs its tensor outputs; the last node's is the delegate's output.
        assert all(r["outputs"] for r in tracer.reports)
        assert torch.equal(tracer.reports[-1]["outputs"][0], expected[-1])


def test_logged_outputs_are_what_each_node_computes():
    delegate, _ = load("convnet")
    tracer = Tracer(logs_values=True)
    run = WebGPUBackend().profiled(delegate, tracer)
    module, inputs, _ = model("convnet")
    (x,) = inputs(3)
    call(run, [x])
    reports = tracer.reports
    # Each output has the dtype and sizes of the graph's value at this call.
    for r, node in zip(reports, delegate.program.nodes, strict=True):
        slots = [s for s, _ in node.outputs]
        assert [(t.dtype, tuple(t.shape)) for t in r["outputs"]] == [
            (TORCH_DTYPE[s.dtype], s.shape) for s in slots
        ]
    assert reports[0]["name"] == "et_vk.conv_with_clamp.default"
    with torch.no_grad():
        stem = torch.relu(module.stem(x))
        F = torch.nn.functional
        pooled = F.max_pool2d(stem + module.pw(F.relu6(module.dw(stem))), 2)
    assert_matches(reports[0]["outputs"][0], stem, rtol=RTOL, what="first convolution")
    (pool,) = [r for r in reports if r["name"] == "aten.max_pool2d_with_indices.default"]
    assert_matches(pool["outputs"][0], pooled, rtol=RTOL, what="max pooling")


def test_fused_and_unfused_swiglu_log_what_eager_computes():
    module, inputs, _ = model("swiglu")
    (x,) = inputs(2)
    with torch.no_grad():
        gate, up = module.gate(x), module.up(x)
    fused, _ = load("swiglu")
    unfused, blob = load("swiglu", **{FUSE_SWIGLU: False})
    assert fused.fused_swiglu == 1 and unfused.fused_swiglu == 0
    reports = {}
    for key, d in (("fused", fused), ("unfused", unfused)):
        tracer = Tracer(logs_values=True)
        call(WebGPUBackend().profiled(d, tracer), [x])
        reports[key] = {r["name"]: r for r in tracer.reports}
    assert_matches(
        reports["fused"][FUSED]["outputs"][0], torch.nn.functional.silu(gate) * up, rtol=RTOL, what="fused"
    )
    sigmoid = reports["unfused"]["aten.sigmoid.default"]
    assert_matches(sigmoid["outputs"][0], torch.sigmoid(gate), rtol=RTOL, what="sigmoid")
    assert len(reports["unfused"]) < len(blob.chain) and len(unfused.program.nodes) == len(blob.chain)


def test_nothing_is_logged_or_read_back_without_a_debug_buffer():
    delegate, blob = load("convnet")
    tracer = Tracer(logs_values=False)
    run = WebGPUBackend().profiled(delegate, tracer)
    assert run.values is None
    _, inputs, _ = model("convnet")
    x = list(inputs(0))
    assert torch.equal(call(run, x)[-1], call(delegate, x)[-1])
    assert len(tracer.reports) == len(blob.chain)
    assert all(r["outputs"] == [] for r in tracer.reports)


def test_dynamic_sizes_and_symint_nodes():
    lowered = export("dynamic", True)
    method = pterun.Runtime.get().load_program(lowered.pte).load_method("forward")
    delegate = max(delegates(method), key=lambda d: len(d.program.nodes))
    delegate.method = method
    graph = delegate.graph
    assert "sym_size.int" in delegate.op_names
    tracer = Tracer(logs_values=True)
    run = WebGPUBackend().profiled(delegate, tracer)
    for n, m in ((16, 8), (3, 2), (9, 5)):
        # The delegate's inputs: x [1, n, 32], its mean square [1, n, 1], y [m, 32].
        shapes = [(1, n, 32), (1, n, 1), (m, 32)]
        assert [len(graph.values[v].dims) for v in graph.inputs] == [len(s) for s in shapes]
        x = [torch.rand(s) + 0.5 for s in shapes]
        outs = [torch.empty(0), torch.empty(0)]
        expected = [*x, *outs]
        delegate(expected)
        got = [*x, torch.empty(0), torch.empty(0)]
        tracer.reports.clear()
        run(got)
        for a, b in zip(got[3:], expected[3:], strict=True):
            assert torch.equal(a, b)
        assert [r["name"].split("(")[0] for r in tracer.reports] == delegate.op_names
        (size,) = [r for r in tracer.reports if r["name"] == "sym_size.int"]
        assert size["outputs"] == []  # a SymInt is not a tensor
        assert torch.equal(tracer.reports[-1]["outputs"][0], expected[-1])
        assert tracer.reports[-1]["outputs"][0].shape == (m, 32)


def test_clock_that_is_not_a_number_falls_back_to_host_waits():
    delegate, _ = load("convnet")
    ticks = itertools.count()
    tracer = Tracer(logs_values=False, clock=lambda: ("tick", next(ticks)))
    run = WebGPUBackend().profiled(delegate, tracer)
    assert not run.uses_gpu_timestamps
    _, inputs, _ = model("convnet")
    call(run, list(inputs(0)))
    stamps = [t for r in tracer.reports for t in (r["start"], r["end"])]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)


def test_blob_without_debug_identifiers_reports_names():
    craft = Craft()
    a = craft.input([4, 8])
    b = craft.op("aten.sigmoid.default", a, out=[4, 8])
    c = craft.op("aten.neg.default", b, out=[4, 8])
    craft.output(c)
    delegate = craft.delegate()
    assert {op.node_id for op in delegate.graph.chain} == {0}  # the premise: no identifiers
    tracer = Tracer(logs_values=True)
    x = torch.randn(4, 8)
    call(WebGPUBackend().profiled(delegate, tracer), [x])
    assert [(r["handle"], r["name"]) for r in tracer.reports] == [
        (-1, "aten.sigmoid.default"),
        (-1, "aten.neg.default"),
    ]
    assert_matches(tracer.reports[0]["outputs"][0], torch.sigmoid(x), rtol=RTOL)
    assert_matches(tracer.reports[1]["outputs"][0], -torch.sigmoid(x), rtol=RTOL)


def test_execute_is_untouched_and_destroy_releases_the_profiled_run():
    delegate, _ = load("convnet")
    assert delegate.profiles == []
    backend = WebGPUBackend()
    with pytest.raises(DelegateInvalidHandle):
        backend.profiled(object(), Tracer(False))
    run = backend.profiled(delegate, Tracer(True))
    _, inputs, _ = model("convnet")
    x = list(inputs(1))
    profiled = call(run, x)[-1]
    dispatches = delegate.dispatch_count
    assert torch.equal(call(delegate, x)[-1], profiled) and delegate.dispatch_count == dispatches
    assert delegate.profiles == [run]
    backend.destroy(delegate)
    assert delegate.profiles == []


def test_gpu_stamps_are_put_on_the_tracer_clock():
    ns = torch.tensor([0.0, 1000.0, 1500.0, 4000.0], dtype=torch.float64).numpy()
    # A clock in nanoseconds: the last stamp lands where completion was seen, durations kept.
    assert on_clock(ns, 10_000, 20_000, 5_000, 15_000) == [16_000, 17_000, 17_500, 20_000]
    # A clock in seconds (floats): durations scaled to its unit.
    times = on_clock(ns, 1.0, 1.00001, 5_000, 15_000)
    assert times[-1] == 1.00001 and abs((times[1] - times[0]) - 1e-6) < 1e-12
    # Never before the first host reading.
    assert on_clock(ns, 100, 102, 0, 2)[0] == 100


def test_more_nodes_than_one_query_set_holds():
    craft = Craft()
    x = v = craft.input([4])
    for _ in range(2050):  # 4100 timestamps: two query sets of at most 4096
        v = craft.op("aten.neg.default", v, out=[4])
    craft.output(v)
    graph = craft.graph()
    for i, op in enumerate(graph.chain):
        op.node_id = i
    delegate = WebGPUDelegate.from_graph(graph, craft.data)
    tracer = Tracer(logs_values=True)
    run = WebGPUBackend().profiled(delegate, tracer)
    assert run.uses_gpu_timestamps and len(run.stamps.sets) == 2
    x = torch.randn(4)
    before = time.perf_counter_ns()
    assert torch.equal(call(run, [x])[-1], x)
    check_times(tracer.reports, before, time.perf_counter_ns())
    assert [r["handle"] for r in tracer.reports] == list(range(2050))
    # Node i negates i + 1 times; the last two are stamped in the second query set.
    last = [r["outputs"][0] for r in tracer.reports[-2:]]
    assert torch.equal(last[0], -x) and torch.equal(last[1], x)


def test_an_etdump_of_a_webgpu_program_has_every_node_inside_the_delegate_call(tmp_path):
    from pterun.format.etdump import DebugEvent, ProfileEvent, read_etdump

    lowered = export("convnet", True)
    (graph,) = graphs(lowered.pte)
    program = pterun.Runtime.get().load_program(lowered.pte, enable_etdump=True, debug_buffer_size=8 << 20)
    method = program.load_method("forward")
    inputs = list(lowered.forward_inputs())
    outputs = method.execute(inputs)
    program.write_etdump_result_to_file(tmp_path / "run.etdp", tmp_path / "run.bin")
    events = read_etdump((tmp_path / "run.etdp").read_bytes())[-1].events
    nodes = [e for e in events if isinstance(e, ProfileEvent) and e.name is None]
    (call,) = [e for e in events if isinstance(e, ProfileEvent) and e.name == "DELEGATE_CALL"]
    assert len(nodes) == len(graph.chain) > 3, "one event per node of the blob (the convnet fuses none)"
    assert all(e.instruction == call.instruction and call.start <= e.start <= e.end <= call.end for e in nodes)
    assert [e.delegate_id for e in nodes] == sorted(e.delegate_id for e in nodes) and nodes[0].delegate_id >= 0
    values = [e for e in events if isinstance(e, DebugEvent) and e.delegate_id >= 0]
    assert values and values[-1].value.sizes == tuple(outputs[0].shape)
    assert_matches(outputs, pterun.Runtime.get().load_program(lowered.pte).load_method("forward").execute(inputs),
                   rtol=RTOL)
