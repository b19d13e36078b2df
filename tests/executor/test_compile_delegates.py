"""compile=True around delegates: each delegate call one operator that TorchInductor calls as it is
(executor/codegen/delegate_op.py), where its backend says its outputs' sizes ahead."""

from __future__ import annotations

import gc

import pytest
import torch

import pterun
from pterun.backends.xnnpack.nodes.native import available as native_kernels_available
from pterun.executor.codegen import delegate_op
from pterun.executor.load.steps import DelegateStep
from tests.executor.test_delegates_and_kernels import DEMO, DemoAdd, delegated, fresh_runtime

pytestmark = pytest.mark.slow  # tens of seconds: such files run first (tests/conftest.py)


class SizedDemoAdd(DemoAdd):
    """The demo backend's `add`, saying what it writes and its output's sizes: a delegate written in Python that
    a compiled method calls."""

    def written_arguments(self, handle, args):
        return [2]

    def output_sizes(self, handle, args):
        return [tuple(args[0].shape)]


def native_kernels_run() -> bool:
    return native_kernels_available()[0]


def _delegate_steps(method) -> list[DelegateStep]:
    return [s for s in method.steps if isinstance(s, DelegateStep)]


def test_a_backend_that_gives_no_output_sizes_keeps_the_method_uncompiled_and_says_why():
    method = fresh_runtime(DemoAdd()).load_program(delegated().pte, compile=True).load_method("forward")
    assert _delegate_steps(method), "premise: a delegate call"
    assert method.compile_status.startswith("not compiled: ") and f"a delegate of {DEMO}" in method.compile_status
    assert "output_sizes" in method.compile_status
    x, y = torch.randn(2, 2), torch.randn(2, 2)
    assert torch.equal(method.execute([x, y])[0], (x + y) * y)


def test_a_python_delegate_that_gives_its_output_sizes_is_called_from_the_compiled_code():
    backend = SizedDemoAdd()
    method = fresh_runtime(backend).load_program(delegated().pte, compile=True).load_method("forward")
    assert len(_delegate_steps(method)) == 1, "premise: a delegate call"
    assert method.compile_status == "compiled", method.compile_status
    assert "_delegate(" in method.functional_source
    for seed in range(3):
        x, y = torch.randn(2, 2, generator=torch.Generator().manual_seed(seed)), torch.full((2, 2), 0.5)
        assert torch.equal(method.execute([x, y])[0], (x + y) * y)
    assert method._loaded.compiled_function.shapes, "premise: the calls ran compiled code"


def test_an_8da4w_decoder_compiles_through_and_around_its_delegates():
    """A transformers decoder quantized as optimum-executorch quantizes it: its products, attention products and
    softmax run in XNNPACK delegates (here on PyTorch's operators, as on a GPU, not pterun's native kernels).
    Compiled, its prompt and one-token steps give the plain method's greedy tokens and its logits within
    float32's tolerance (Inductor fuses steps, which may round a unit in the last place apart). Delegates whose
    translation calls PyTorch alone are traced into the compiled code; the others (the 8-bit rows' products,
    whose buffers hold two dtypes) stay one call each."""
    from tests.support.llm_programs import transformers_program

    options = {"XnnpackBackend": {"native": False}}
    pte = transformers_program("qwen2-8da4w").pte
    plain = pterun.Runtime.get().load_program(pte, backend_options=options).load_method("forward")
    compiled = pterun.Runtime.get().load_program(pte, compile=True, backend_options=options).load_method("forward")
    delegates = _delegate_steps(compiled)
    assert len(delegates) >= 4 and {s.name for s in delegates} == {"XnnpackBackend"}
    assert compiled.compile_status == "compiled", compiled.compile_status
    tokens, position = [3, 17, 25, 9, 41, 7], 0
    calls = [(torch.tensor([tokens]), torch.arange(len(tokens)))]
    for step in range(5):
        ids, positions = calls[-1]
        expected = plain.execute([ids, positions])[0]
        with torch.profiler.profile() as profile:
            actual = compiled.execute([ids, positions])[0]
        error, scale = (actual - expected).abs().max().item(), expected.abs().max().item()
        assert scale > 0 and error <= 1e-5 * scale, f"call {step}: logits {error:.3g} off (scale {scale:.3g})"
        token = int(expected[0, -1].argmax())
        assert int(actual[0, -1].argmax()) == token
        position += ids.shape[1]
        calls.append((torch.tensor([[token]]), torch.tensor([position])))
    function = compiled._loaded.compiled_function
    assert [tuple(s[0]) for s in function.shapes] == [(1, 1)], "premise: the one-token step ran compiled"
    opaque = [e.name for e in profile.events()].count("pterun::opaque_delegate")
    assert 0 < opaque < len(delegates), f"{opaque} of {len(delegates)} delegates called as they are"


def test_where_the_native_kernels_run_an_xnnpack_method_stays_uncompiled_and_says_why():
    """On the CPU, where pterun's native kernels run XNNPACK's delegates, the method's own code (native steps) is
    faster than Inductor's around the delegates: compile=True leaves it as it is, and the status says why."""
    from tests.support.llm_programs import transformers_program

    assert native_kernels_run(), "premise: pterun's native kernels run here (CI builds them)"
    pte = transformers_program("qwen2-8da4w").pte
    method = pterun.Runtime.get().load_program(pte, compile=True).load_method("forward")
    assert method.compile_status.startswith("not compiled: ") and "native kernels" in method.compile_status
    plain = pterun.Runtime.get().load_program(pte).load_method("forward")
    ids, positions = torch.tensor([[3, 17, 25]]), torch.arange(3)
    assert torch.equal(method.execute([ids, positions])[0], plain.execute([ids, positions])[0])


def test_a_dropped_methods_delegate_calls_are_forgotten():
    method = fresh_runtime(SizedDemoAdd()).load_program(delegated().pte, compile=True).load_method("forward")
    tokens = {op.token for op in method.functional.delegate_ops}
    assert tokens and tokens <= set(delegate_op._LIVE)
    del method
    gc.collect()
    assert not tokens & set(delegate_op._LIVE)


def test_compiled_code_that_calls_delegates_is_not_kept_in_the_load_cache(tmp_path):
    """Its delegates are named by tokens of this process: an entry could serve no other."""
    x, y = torch.randn(2, 2), torch.randn(2, 2)
    for load in range(2):
        runtime = fresh_runtime(SizedDemoAdd())
        method = runtime.load_program(delegated().pte, compile=True, cache_dir=tmp_path).load_method("forward")
        assert torch.equal(method.execute([x, y])[0], (x + y) * y)
        ahead = method._loaded.compiled_function.ahead
        assert not any(a.from_cache for a in ahead.values()), f"load {load}"


_VIEW_COPIES = {"aten::slice_copy.Tensor_out": (torch.ops.aten.slice_copy.Tensor, (1, 1, 7, 2)),
                "aten::select_copy.int_out": (torch.ops.aten.select_copy.int, (2, 3))}


@pytest.mark.parametrize("name", sorted(_VIEW_COPIES))
def test_slice_and_select_copies_are_a_view_and_a_copy_inductor_fuses(name):
    """Inductor lowers neither slice_copy nor select_copy: compiled, each was a kernel of ATen's that nothing fused
    into. Their functional forms are the view and a contiguous copy: the same values, memory of their own, and
    compiled code that calls no ATen copy."""
    from pterun.kernels.aten import functional_of

    op, args = _VIEW_COPIES[name]
    x = torch.randn(3, 8, 5)
    form = functional_of(name)
    got = form.fn(x, *args)
    assert torch.equal(got, op(x, *args))
    assert got.is_contiguous() and got.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    compiled = torch.compile(lambda t: form.fn(t, *args) * 2, fullgraph=True)
    compiled(x)
    with torch.profiler.profile() as profile:
        result = compiled(x)
    assert torch.equal(result, got * 2)
    called = {e.name for e in profile.events()}
    assert "aten::mul" not in called, "premise: the profile sees the compiled code, not an eager run"
    assert f"aten::{name.split('::')[1].split('.')[0]}" not in called
