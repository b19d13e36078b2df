"""Programs lowered with ExecuTorch's WebGPUPartitioner, run on pterun's WebGPU backend, against the same
models exported without a partitioner and run on ExecuTorch's CPU runtime."""

from __future__ import annotations

import pytest

import pterun
from pterun.backends.webgpu import device
from pterun.backends.webgpu.slots import TSlot
from pterun.format import ProgramFile
from tests.backends.webgpu.adapter import needs_adapter
from tests.backends.webgpu.programs import RTOL, delegate_ops, delegates, export, graphs, model
from tests.support.compare import assert_matches
from tests.support.differential import flat
from tests.support.oracle import reference_module, run_reference

pytestmark = [needs_adapter, pytest.mark.slow]  # slow: runs first (tests/conftest.py)

# The operators each model's VulkanBackend delegates must hold (what the test claims to cover).
CLAIMS = {
    # ExecuTorch's example Llama: fused RMSNorm and rotary operators, GQA attention by bmm and softmax.
    "et_llama": {
        "aten.embedding.default",
        "et_vk.rms_norm.default",
        "et_vk.apply_rotary_emb.default",
        "aten.linear.default",
        "aten.bmm.default",
        "aten._softmax.default",
        "aten.sigmoid.default",
        "aten.mul.Tensor",
        "aten.add.Tensor",
        "aten.where.self",
        "aten.view_copy.default",
        "aten.permute_copy.default",
        "aten.expand_copy.default",
        "aten.slice_copy.Tensor",
        "aten.select_copy.int",
    },
    # transformers' LlamaForCausalLM: rotary tables computed in the graph (arange, cos, sin), rotate_half
    # by slice/neg/cat, the causal mask by comparisons.
    "llama": {
        "aten.embedding.default",
        "et_vk.rms_norm.default",
        "aten.linear.default",
        "aten.bmm.default",
        "aten._softmax.default",
        "aten.arange.start_step",
        "aten.cos.default",
        "aten.sin.default",
        "aten.cat.default",
        "aten.neg.default",
        "aten.slice_copy.Tensor",
        "aten.le.Tensor",
        "aten.bitwise_and.Tensor",
        "aten.sigmoid.default",
        "dim_order_ops._to_dim_order_copy.default",
    },
    "swiglu": {"aten.linear.default", "aten.sigmoid.default", "aten.mul.Tensor"},
    "convnet": {
        "et_vk.conv_with_clamp.default",
        "aten.convolution.default",
        "aten.add.Tensor",
        "aten.max_pool2d_with_indices.default",
        "aten.avg_pool2d.default",
        "aten.linear.default",
    },
}


@pytest.mark.parametrize("name", sorted(CLAIMS))
def test_matches_cpu_runtime(name):
    lowered, reference = export(name, True), export(name, False)
    ops = delegate_ops(lowered.pte)
    missing = CLAIMS[name] - set(ops)
    assert not missing, f"the partitioner no longer puts {sorted(missing)} in the delegates"
    method = pterun.Runtime.get().load_program(lowered.pte).load_method("forward")
    assert delegates(method), "no VulkanBackend delegate"
    _, inputs, _ = model(name)
    for seed in range(3):
        args = flat(inputs(seed))
        assert_matches(
            method.execute(args), run_reference(reference.pte, args), rtol=RTOL, what=f"{name} seed {seed}"
        )


def test_kv_cached_decoder_steps_match():
    """ExecuTorch's example Llama with its KV cache: the caches are program state updated on the CPU between
    delegates (index_put), the delegates look rotary tables up by position (index.Tensor)."""
    lowered, reference = export("et_llama_kv", True), export("et_llama_kv", False)
    ops = delegate_ops(lowered.pte)
    assert {
        "aten.index.Tensor",
        "et_vk.rms_norm.default",
        "aten.bmm.default",
        "aten._softmax.default",
    } <= set(ops)
    method = pterun.Runtime.get().load_program(lowered.pte).load_method("forward")
    oracle = reference_module(reference.pte)
    _, inputs, _ = model("et_llama_kv")
    for step in range(5):
        args = flat(inputs(step))
        assert_matches(method.execute(args), oracle.forward(args), rtol=RTOL, what=f"step {step}")


def test_whole_convnet_is_one_delegate():
    lowered = export("convnet", True)
    assert len(graphs(lowered.pte)) == 1 and not ProgramFile(lowered.pte).plan("forward").operators


def test_memory_is_planned_once_and_reused():
    lowered = export("et_llama", True)
    method = pterun.Runtime.get().load_program(lowered.pte).load_method("forward")
    _, inputs, _ = model("et_llama")
    gpu = device.gpu()
    for d in delegates(method):
        p = d.program
        intermediates = {
            id(s.storage): s.storage.nbytes for s in p.slots.tensors() if s.storage.kind == "plan"
        }
        if len(intermediates) > 4:
            assert p.planned_bytes < sum(intermediates.values()), "no two intermediates share a buffer"
    method.execute(flat(inputs(0)))

    # From now on nothing may be allocated or compiled, and each call is one write per input and one
    # mapping of the readback buffer per delegate.
    calls = {"write_buffer": 0, "map": 0}
    real_write, real_map = gpu.queue.write_buffer, None

    def forbidden(*a, **k):
        raise AssertionError("allocated or compiled during execute")

    def counting_write(*a, **k):
        calls["write_buffer"] += 1
        return real_write(*a, **k)

    mp = pytest.MonkeyPatch()
    try:
        for attr in ("create_buffer", "create_compute_pipeline", "create_bind_group", "create_shader_module"):
            mp.setattr(gpu.device, attr, forbidden)
        mp.setattr(gpu.queue, "write_buffer", counting_write)
        for d in delegates(method):
            rb = d.program._readback
            real_map = rb.map_sync

            def counting_map(*a, _real=real_map, **k):
                calls["map"] += 1
                return _real(*a, **k)

            mp.setattr(rb, "map_sync", counting_map)
        method.execute(flat(inputs(1)))
    finally:
        mp.undo()
    tensor_inputs = sum(1 for d in delegates(method) for s in d.program.inputs if isinstance(s, TSlot))
    assert calls == {"write_buffer": tensor_inputs, "map": len(delegates(method))}
