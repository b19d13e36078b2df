"""compile=True: methods rewritten as pure functions and compiled by TorchInductor still match ExecuTorch."""

from __future__ import annotations

import pytest
import torch

import pterun
from pterun.cli.options import example_program
from tests.support.compare import assert_matches
from tests.support.differential import export_model, flat
from tests.support.models import build
from tests.support.oracle import reference_module, run_reference

pytestmark = pytest.mark.slow  # tens of seconds: such files run first (tests/conftest.py)


@pytest.mark.parametrize("name", ["llama", "mobilenet_v2", "et_llama_kv"])
def test_compiled_method_matches_executorch(name):
    exported = export_model(name, "portable")
    method = pterun.Runtime.get().load_program(exported.pte, compile=True).load_method("forward")
    assert method.compile_status == "compiled", method.compile_status
    make_inputs = build(name).make_inputs
    reference = reference_module(exported.pte)
    for seed in (0, 1, 2):
        args = flat(make_inputs(seed))
        expected = list(reference.run_method("forward", [a.clone() if isinstance(a, torch.Tensor) else a
                                                         for a in args]))
        assert_matches(method.execute(args), expected, rtol=1e-4, what=f"{name} call {seed}")


class Branchy(torch.nn.Module):
    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda x: x * 2, lambda x: x - 1, (x,))


def test_what_cannot_be_compiled_runs_as_usual_and_says_why():
    from tests.support.exporting import ExportSpec, export_program

    exported = export_program("compile-cond", lambda: ExportSpec(Branchy(), (torch.randn(3),)))
    plan = pterun.format.ProgramFile(exported.pte).plan("forward")
    assert any(isinstance(i, pterun.format.JumpFalseCall) for i in plan.instructions), "premise: control flow"
    method = pterun.Runtime.get().load_program(exported.pte, compile=True).load_method("forward")
    assert method.compile_status.startswith("not compiled: ") and "control flow" in method.compile_status
    for x in (torch.ones(3), -torch.ones(3)):
        assert_matches(method.execute([x]), run_reference(exported.pte, [x]))


@pytest.mark.parametrize("name", sorted(__import__("tests.support.models", fromlist=["MODELS"]).MODELS))
def test_functional_form_computes_what_the_method_computes(name):
    """The function handed to torch.compile, run as plain Python: the same outputs as the method.

    Every model compiles; one that cannot would be listed here by name with its reason, never skipped."""
    exported = export_model(name, "portable")
    plain = pterun.Runtime.get().load_program(exported.pte).load_method("forward")
    functional = pterun.Runtime.get().load_program(exported.pte, compile=True).load_method("forward")
    assert functional.compile_status == "compiled", f"{name}: {functional.compile_status}"
    make_inputs = build(name).make_inputs
    stateful = any(isinstance(v, pterun.format.TensorSpec) and v.memory_id is not None and v.fqn
                   for v in functional.plan.values)
    for seed in (0,) if stateful else (0, 1):
        args = flat(make_inputs(seed))
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        with torch.inference_mode():
            outputs = list(functional.functional(*tensors))
        assert_matches(outputs, plain.execute(args), rtol=1e-5, what=f"{name} seed {seed}")


@pytest.mark.parametrize("way", ["ahead", "torch.compile"])
def test_every_compiled_method_gets_compiled_code_of_its_own(way):
    """Many programs compiled in one process: each method holds compiled code of its own, compiled ahead of time
    (the default) or, with Inductor's caches off, by torch.compile in the method's own frame.

    A generated function torch.compile cannot find the source of is wrapped in a frame shared by every
    such function, and after the eighth its recompilation limit made the rest run uncompiled while
    their status still said "compiled"."""
    from torch._C._dynamo.eval_frame import _debug_get_cache_entry_list

    from pterun.executor.codegen import ahead
    from tests.executor import programs

    exported = programs.add_mul()
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    methods = []
    with torch._inductor.config.patch(force_disable_caches=way != "ahead"):
        assert ahead.available() == (way == "ahead"), "premise: the way under test"
        for _ in range(torch._dynamo.config.recompile_limit + 3):
            method = pterun.Runtime.get().load_program(exported.pte, compile=True, cache_dir=False).load_method(
                "forward")
            outputs = method.execute([x, y])
            assert_matches(outputs, [x + y, x * y])
            methods.append(method)
    for i, method in enumerate(methods):
        assert method.compile_status == "compiled", (i, method.compile_status)
        compiled = method._loaded.compiled_function
        if way == "ahead":
            assert len(compiled.ahead) == 1, f"method {i}"
        else:
            assert not compiled.ahead and _debug_get_cache_entry_list(method.functional.__code__), f"method {i}"


def test_a_method_torch_compile_leaves_uncompiled_says_so_and_still_runs():
    from tests.executor import programs

    exported = programs.add_mul()
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    method = pterun.Runtime.get().load_program(exported.pte, compile=True).load_method("forward")
    assert method.compile_status == "compiled", "premise: the method has a functional form"
    # torch.compile's own path (Inductor's caches off: no compiling ahead of time), with the process-wide
    # budget of compiled frames spent
    with torch._inductor.config.patch(force_disable_caches=True), \
            torch._dynamo.config.patch(accumulated_recompile_limit=0):
        outputs = method.execute([x, y])
    assert method.compile_status.startswith("not compiled: "), method.compile_status
    assert_matches(outputs, [x + y, x * y])
    assert_matches(method.execute([y, x]), [y + x, y * x])


def test_a_compiled_method_keeps_its_thread_count_on_a_busy_machine(monkeypatch):
    """Dynamo guards compiled code on ``torch.get_num_threads()``: a count that followed the machine's load
    compiled the method again whenever the load moved (minutes each on a language model)."""
    from torch._C._dynamo.eval_frame import _debug_get_cache_entry_list

    from pterun.executor.call import threads
    from tests.executor.programs import AddMul
    from tests.support.exporting import ExportSpec, export_program

    if threads.cores() < 2 or torch.get_num_threads() < 2:
        pytest.skip("needs two cores: with one, every call runs on one thread")
    x, y = torch.randn(256, 256), torch.randn(256, 256)
    exported = export_program("compile-threads-add-mul", lambda: ExportSpec(AddMul(), (x, y)))
    plain = pterun.Runtime.get().load_program(exported.pte).load_method("forward")
    assert plain.num_threads_reason.startswith("torch.get_num_threads()"), "premise: the count follows the load"
    method = pterun.Runtime.get().load_program(exported.pte, compile=True).load_method("forward")
    assert_matches(method.execute([x, y]), [x + y, x * y])
    assert method.compile_status == "compiled", method.compile_status

    def uncompiled(*args):
        raise AssertionError("a call ran uncompiled: the compiled code's guards refused it")

    monkeypatch.setattr(method._loaded.compiled_function, "uncompiled", uncompiled)
    count = method.num_threads
    assert count == min(torch.get_num_threads(), threads.cores()) and "fixed" in method.num_threads_reason
    monkeypatch.setattr(threads._LOAD, "free_cores", lambda: 0.0)  # other processes hold every core
    monkeypatch.setattr(threads._HELD, "running", [1])  # and another call of pterun runs
    assert plain.num_threads == 1, "premise: a plain method would take one thread now"
    for _ in range(2):
        assert_matches(method.execute([y, x]), [y + x, y * x])
    assert method.num_threads == count
    compiled = method._loaded.compiled_function
    assert len(compiled.shapes) == 1 and not _debug_get_cache_entry_list(method.functional.__code__), \
        "compiled once"
    assert method.compile_status == "compiled"


def test_a_method_of_dynamic_shapes_compiles_a_set_of_shapes_once_it_comes_twice_in_a_row():
    """A language model's one-token step recurs and its prompts do not, or come back between generations:
    compiling every set of shapes on its first call (or one graph of symbolic sizes) spent minutes on prompts
    that never came back, and compiling a prompt's length on its second sight stalled a generation for
    seconds."""
    from torch._C._dynamo.eval_frame import _debug_get_cache_entry_list

    from tests.executor import programs

    exported = programs.dynamic_add_mul()
    plan = pterun.format.ProgramFile(exported.pte).plan("forward")
    assert any(isinstance(v, pterun.format.TensorSpec) and v.dynamism == pterun.format.Dynamism.DYNAMIC_BOUND
               for v in plan.values), "premise: the inputs can change shape"
    method = pterun.Runtime.get().load_program(exported.pte, compile=True).load_method("forward")

    def entries() -> int:
        assert not _debug_get_cache_entry_list(method.functional.__code__), "compiled ahead of time, not in a frame"
        return len(method._loaded.compiled_function.shapes)

    def call(batch: int) -> None:
        x, y = torch.randn(batch, 3), torch.randn(batch, 3)
        assert_matches(method.execute([x, y]), [x + y, x * y], what=f"batch {batch}")

    call(3)
    assert entries() == 0, "a set of shapes seen once runs uncompiled"
    call(1)
    call(3)
    assert entries() == 0, "a set of shapes that comes back after another runs uncompiled (a prompt's length)"
    call(3)
    assert entries() == 1, "twice in a row compiled it"
    call(1)
    call(1)
    assert entries() == 2, "and batch 1, twice in a row, in a graph of its own"
    for batch in (1, 3, 1):
        call(batch)
    assert entries() == 2 and method.compile_status == "compiled", method.compile_status


def test_calls_left_uncompiled_run_the_methods_own_code_over_the_same_state():
    """A prompt's shapes are not compiled: such calls run the generated code (planned memory, fused chains), which
    on an H100 took a 100M decoder's prompt in 14 ms where the functional form run eagerly took 24. Compiled and
    uncompiled calls alternate over one state."""
    from tests.executor import programs

    exported = programs.dynamic_accumulate()
    method = pterun.Runtime.get().load_program(exported.pte, compile=True).load_method("forward")
    compiled = method._loaded.compiled_function
    assert compiled is not None and compiled.uncompiled is not compiled.functional, "premise: a plain path"
    total = torch.zeros(3)
    for rows in (4, 1, 1, 1, 4, 1, 5):
        x = torch.randn(rows, 3)
        total += x.sum(0)
        assert_matches(method.execute([x]), [total * 2 + x], what=f"{rows} rows")
    assert method.compile_status == "compiled", method.compile_status
    assert torch.Size([1, 3]) in {key[0] for key in compiled.shapes} and len(compiled.shapes) == 1, \
        "premise: the one-row calls ran compiled, the others uncompiled"


def test_compiled_code_past_the_recompile_limit_says_so_and_other_shapes_still_run():
    from tests.executor import programs

    exported = programs.dynamic_add_mul()
    method = pterun.Runtime.get().load_program(exported.pte, compile=True).load_method("forward")
    with torch._dynamo.config.patch(recompile_limit=1):
        for batch in (2, 2, 3, 3, 3):
            x, y = torch.randn(batch, 3), torch.randn(batch, 3)
            assert_matches(method.execute([x, y]), [x + y, x * y], what=f"batch {batch}")
    assert method.compile_status.startswith("compiled for 1 set of input shapes"), method.compile_status


def test_calls_a_kernel_can_make_together_are_one_call_in_the_functional_form():
    """A kernel whose functional form computes several calls that share their first argument in one call
    (``Functional.together``; on CUDA a layer's query, key and value products in one launch, kernels/triton/
    gemv.py) gets one call for them, at the first; checked on the CPU with mm given such a form, over
    transformers' decoder: the function computes what the method computes, prompt and decode step."""
    import dataclasses

    from pterun.core.device import DeviceType
    from pterun.executor import Registries
    from pterun.kernels import aten, default_registry
    from pterun.runtime import default_allocators, default_backend_registry
    from tests.support.llm_programs import transformers_program

    groups = []

    def together(a, weights):
        groups.append(len(weights))
        return [torch.mm(a, w) for w in weights]

    def mm(count):
        binding = aten.aten_kernel("aten::mm.out")(count)
        return dataclasses.replace(binding, functional=dataclasses.replace(binding.functional, together=together))

    kernels = default_registry()
    kernels.register("aten::mm.out", mm, DeviceType.CPU)
    runtime = pterun.Runtime(Registries(kernels, default_backend_registry(), default_allocators()))
    pte = transformers_program().pte
    method = runtime.load_program(pte, compile=True).load_method("forward")
    plain = pterun.Runtime.get().load_program(pte).load_method("forward")
    # Two layers, each with query, key and value products of one row and gate and up products of another.
    assert method.functional_source.count("_together(") == 4
    position = 0
    for tokens in ([[1, 5, 6, 7]], [[9]]):
        ids = torch.tensor(tokens)
        positions = torch.arange(position, position + ids.shape[1])
        position += ids.shape[1]
        with torch.inference_mode():
            outputs = list(method.functional(ids, positions))
        assert torch.equal(outputs[0], plain.execute([ids, positions])[0])
    assert groups == [3, 2, 3, 2] * 2


_SECOND_PROCESS = """
import sys, torch, pterun
method = pterun.Runtime.get().load_program(sys.argv[1], compile=True, cache_dir=sys.argv[2]).load_method("forward")
x, y = torch.arange(6.0).reshape(2, 3), torch.full((2, 3), 0.5)
outputs = method.execute([x, y])
compiled = method._loaded.compiled_function
print(method.compile_status, [a.from_cache for a in compiled.ahead.values()],
      torch.equal(outputs[0], x + y) and torch.equal(outputs[1], x * y))
"""


def test_a_second_process_reads_the_compiled_code_from_the_load_cache(tmp_path):
    """Dynamo traced a compiled method again in every process: 5.8 of a second process's 6.2 s on the 100M
    decoder's one-token step (a CPU). The code compiled ahead of time is kept in the load cache, and another
    process runs it without tracing."""
    import subprocess
    import sys

    from tests.executor import programs

    exported = programs.add_mul()
    cache = tmp_path / "cache"

    def run() -> str:
        done = subprocess.run([sys.executable, "-c", _SECOND_PROCESS, str(exported.pte), str(cache)],
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout.strip().splitlines()[-1]

    assert run() == "compiled [False] True"
    assert any(cache.rglob("*")), "premise: the first process kept something"
    assert run() == "compiled [True] True"


def test_compiled_code_is_kept_under_everything_it_depends_on(tmp_path):
    """The key of a method's compiled code in the load cache: the source, every number the code reads by name
    (a float that differs, as an epsilon may between two models of one shape, is another entry), what a
    Python function the code calls closes over, and each tensor's layout; not the values of tensors, which
    are the compiled graph's inputs."""
    from pterun.executor.cache import LoadCache
    from pterun.executor.codegen import ahead

    cache = LoadCache(tmp_path)
    x = torch.randn(2, 3)

    def key(**closure) -> str | None:
        return ahead._key(cache, "def run(x): ...", closure, [x])

    def scaled(by):
        return lambda t: t * by

    base = key(eps=1e-5, w=torch.zeros(3, 4), f=scaled(2.0))
    assert base is not None
    assert key(eps=1e-5, w=torch.ones(3, 4), f=scaled(2.0)) == base, "a tensor's values are the graph's inputs"
    assert key(eps=1e-6, w=torch.zeros(3, 4), f=scaled(2.0)) != base
    assert key(eps=1e-5, w=torch.zeros(4, 3).t(), f=scaled(2.0)) != base, "strides"
    assert key(eps=1e-5, w=torch.zeros(3, 4), f=scaled(3.0)) != base, "what a function closes over"
    assert key(eps=1e-5, w=torch.zeros(3, 4, dtype=torch.bfloat16), f=scaled(2.0)) != base
    assert key(eps=1e-5, w=torch.zeros(3, 4), f=object()) is None, "a value it cannot describe keeps no entry"


def test_a_damaged_compiled_entry_is_a_miss(tmp_path):
    from pterun.executor.cache import LoadCache
    from pterun.executor.codegen import ahead

    def run(x):
        return (x + 1,)

    cache = LoadCache(tmp_path)
    x = torch.randn(2, 3)
    key = ahead._key(cache, "run", ahead._closure(run), [x])
    assert key is not None
    cache.put(key, b"not a compiled function")
    compiled = ahead.compile_ahead(run, [x], "run", cache)
    assert compiled is not None and not compiled.from_cache
    assert torch.equal(compiled.run(x)[0], x + 1)
    again = ahead.compile_ahead(run, [x], "run", cache)
    assert again is not None and again.from_cache, "the entry was written again"


def test_a_call_the_compiled_codes_guards_refuse_runs_uncompiled_and_says_so():
    """Code compiled ahead of time holds the guards Dynamo traced it under (its inputs' strides among them): a
    call they refuse runs the method's own code, right, and the status says some calls ran uncompiled."""
    from tests.executor import programs

    exported = programs.add_mul()
    method = pterun.Runtime.get().load_program(exported.pte, compile=True, cache_dir=False).load_method("forward")
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    assert_matches(method.execute([x, y]), [x + y, x * y])
    assert method.compile_status == "compiled" and method._loaded.compiled_function.ahead, "premise: ahead of time"
    transposed = torch.randn(3, 2).t()  # the same shape, other strides
    outputs = method.execute([transposed, y])
    assert torch.equal(outputs[0], transposed + y) and torch.equal(outputs[1], transposed * y)
    assert method.compile_status.startswith("compiled; some calls ran uncompiled"), method.compile_status


class _Double(torch.nn.Module):
    def forward(self, x):
        return x * 2


def test_a_method_that_only_returns_a_constant_is_not_compiled_and_says_so():
    """A language model's metadata methods have no instruction: nothing to compile (where one was handed to torch,
    its ahead-of-time compile asserted on the empty graph: a runner with compile=True failed reading its
    metadata)."""
    from tests.support.exporting import ExportSpec, export_program

    exported = export_program("compile-constant-method", lambda: ExportSpec(
        _Double(), (torch.ones(2),), constant_methods={"get_max_seq_len": 16, "use_kv_cache": True}))
    plan = pterun.format.ProgramFile(exported.pte).plan("get_max_seq_len")
    assert not plan.instructions, "premise: a method without an instruction"
    program = pterun.Runtime.get().load_program(exported.pte, compile=True)
    for name, value in (("get_max_seq_len", 16), ("use_kv_cache", True)):
        method = program.load_method(name)
        assert method.execute([]) == [value]
        assert method.compile_status == "not compiled: the method has no instruction, only values it returns"
    forward = program.load_method("forward")
    assert_matches(forward.execute([torch.ones(2)]), [torch.full((2,), 2.0)])
    assert forward.compile_status == "compiled"


def test_the_plain_code_is_kept_only_where_clearly_faster_and_the_status_says_so():
    """On a GPU the graphs of the compiled and the plain code are timed (call/graphs.py, tests/gpu/test_graphs.py);
    what the times decide, and what the status says, is the compiled function's."""
    from pterun.executor.codegen.torch_compile import PLAIN_KEPT

    method = pterun.Runtime.get().load_program(example_program(), compile=True).load_method("forward")
    compiled = method._loaded.compiled_function
    assert compiled is not None and method.compile_status == "compiled", "premise: the method has a functional form"
    key = ((torch.Size([1, 8]),), ())  # the graph runner's: the arguments' shapes, the planned dynamic inputs'
    assert not compiled.keep_plain(key, 1.0, 0.95), "within a tenth: the compiled code, as asked, stays"
    assert method.compile_status == "compiled"
    assert compiled.keep_plain(key, 0.083, 0.056)
    assert method.compile_status == (f"{PLAIN_KEPT} for inputs of shapes [1, 8]: replayed from a CUDA graph it took "
                                     "0.056 ms a call, the compiled code 0.083 ms"), method.compile_status
    assert compiled.timed == {key: (0.083, 0.056)}


def test_a_decoders_compiled_code_can_be_read_back_by_another_process(tmp_path):
    """torch saves the guards of code compiled ahead of time with the Python functions they read, by qualified name;
    one whose name finds nothing is saved as missing, and the guards reading it failed on every load. The views
    that copy where the plan's layout needs it (load/fold.py) had such a name: every transformers decoder's entry
    was written and never read (the 100M decoder's second process traced it again, 9.9 s instead of 1.8 on a CPU).
    Every function the functional form calls is one a saved guard finds again, and the method gets an entry."""
    import types

    from pterun.executor.cache import LoadCache
    from pterun.executor.codegen import ahead
    from tests.support.llm_programs import bench_decoder_program

    method = pterun.Runtime.get().load_program(bench_decoder_program(), compile=True).load_method("forward")
    compiled = method._loaded.compiled_function
    assert compiled is not None, method.compile_status
    closure = ahead._closure(compiled.functional)
    functions = {name: v for name, v in closure.items() if isinstance(v, types.FunctionType)}
    assert any(v.__name__.endswith("_laid_out") for v in functions.values()), "premise: a view laid out as planned"
    assert all(ahead._found_again(v) for v in functions.values()), [
        f"{n}: {v.__module__}.{v.__qualname__}" for n, v in functions.items() if not ahead._found_again(v)]
    step = [torch.zeros(1, 1, dtype=torch.long), torch.zeros(1, dtype=torch.long)]
    assert ahead._key(LoadCache(tmp_path), compiled.source, closure, step) is not None


_DECODER_STEPS = """
import sys, torch, pterun
method = pterun.Runtime.get().load_program(sys.argv[1], compile=True, cache_dir=sys.argv[2]).load_method("forward")
token, position = torch.tensor([[5]]), torch.tensor([0])
logits = [method.execute([token, position])[0] for _ in range(2)]  # a set of shapes compiles when it comes twice
compiled = method._loaded.compiled_function
print(method.compile_status, [a.from_cache for a in compiled.ahead.values()], logits[1].flatten()[:4].tolist())
"""


def test_a_second_process_reads_a_decoders_compiled_step_back(tmp_path):
    """What a user's second process gets: the decoder's one-token step read back from the load cache, not traced
    again, and the same logits."""
    import subprocess
    import sys

    from tests.support.llm_programs import bench_decoder_program

    pte, cache = bench_decoder_program(), tmp_path / "cache"

    def run() -> tuple[str, str]:
        done = subprocess.run([sys.executable, "-c", _DECODER_STEPS, str(pte), str(cache)], capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        status, _, logits = done.stdout.strip().splitlines()[-1].partition("] ")
        return status + "]", logits

    first, logits = run()
    assert first == "compiled [False]", first
    assert run() == ("compiled [True]", logits)


def test_a_function_whose_name_finds_nothing_keeps_the_method_out_of_the_cache(tmp_path):
    from pterun.executor.cache import LoadCache
    from pterun.executor.codegen import ahead

    def nested(t):
        return t + 1

    assert ahead._found_again(nested) and ahead._found_again(ahead._describe), "nested; module-level, by its name"
    lost = _named(nested, "nowhere_to_be_found")
    assert not ahead._found_again(lost)
    cache = LoadCache(tmp_path)
    assert ahead._key(cache, "def run(x): ...", {"f": nested}, [torch.zeros(2)]) is not None
    assert ahead._key(cache, "def run(x): ...", {"f": lost}, [torch.zeros(2)]) is None


def _named(function, qualname: str):
    import types

    copy = types.FunctionType(function.__code__, function.__globals__, function.__name__, function.__defaults__,
                              function.__closure__)
    copy.__qualname__ = qualname
    return copy
