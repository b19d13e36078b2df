"""Bundled programs (.bpte) on pterun.pybindings and on ExecuTorch's runtime, side by side.

Every bundle is made with ExecuTorch's devtools (tests/support/bundling.py) and run by both runtimes: the
same test cases pass on both with matching outputs, the same calls fail on both with the same error code,
and pterun's module keeps working after each failure. ExecuTorch's own end-to-end test of bundled programs
runs against pterun at the end.
"""

from __future__ import annotations

import gc
import re

import pytest
import torch

pytest.importorskip("executorch.devtools.bundled_program.core")

from pterun import pybindings  # noqa: E402
from pterun.errors import ErrorCode, PteError  # noqa: E402
from pterun.format.bundled import BundledFile  # noqa: E402
from tests.support import bundling  # noqa: E402
from tests.support.compare import assert_matches  # noqa: E402
from tests.support.oracle import _runtime  # noqa: E402


@pytest.fixture(scope="module")
def executorch():
    return _runtime()


@pytest.fixture(scope="module")
def sample():
    exported, model = bundling.sample()
    cases = {name: bundling.eager_cases(model, name, bundling.sample_inputs(5, seed))
             for seed, name in enumerate(model.method_names)}
    return exported, bundling.bundle(exported.pte, cases)


@pytest.fixture(scope="module")
def two():
    exported, model = bundling.two_methods()
    inputs = bundling.two_methods_inputs(4, seed=1)
    cases = {name: bundling.eager_cases(model, name, inputs[name]) for name in inputs}
    return exported, model, cases, bundling.bundle(exported.pte, cases)


def _executorch_code(error: RuntimeError) -> int:
    """The error code in ExecuTorch's message ("failed with status 0x12", "... with status 32")."""
    match = re.search(r"(?:status|error:) (0x[0-9a-f]+|\d+)", str(error))
    assert match, f"no error code in ExecuTorch's message {str(error)!r}"
    return int(match.group(1), 0)


def _both_fail(ours, theirs, *args, **kwargs) -> PteError:
    """Calls ``verify_result_with_bundled_expected_output`` on both; both must raise, with the same code."""
    with pytest.raises(RuntimeError) as theirs_error:
        theirs.verify_result_with_bundled_expected_output(*args, **kwargs)
    with pytest.raises(PteError) as ours_error:
        ours.verify_result_with_bundled_expected_output(*args, **kwargs)
    assert int(ours_error.value.code) == _executorch_code(theirs_error.value), (ours_error.value, theirs_error.value)
    return ours_error.value


def test_every_test_case_passes_on_both_runtimes_with_matching_outputs(executorch, sample, two):
    for data in (sample[1], two[3]):
        file = BundledFile(data)
        assert len(file.method_names) == 2 and all(len(s.test_cases) >= 4 for s in file.suites.values())
        ours = pybindings._load_bundled_program_from_buffer(data)
        theirs = executorch._load_bundled_program_from_buffer(data)
        for name in file.method_names:
            for index in range(len(file.suites[name].test_cases)):
                expected = theirs.verify_result_with_bundled_expected_output(name, index)
                actual = ours.verify_result_with_bundled_expected_output(name, index)
                assert_matches(actual, expected, what=f"{name} case {index}")


def test_the_kinds_of_value_a_bundle_holds_are_all_exercised(sample, two):
    # Premise of the test above: int32 tensors and an Int input; Float and Bool outputs; a Double input.
    kinds = {type(v).__name__ for data in (sample[1], two[3]) for s in BundledFile(data).suites.values()
             for case in s.test_cases for v in case.inputs}
    assert kinds == {"BundledTensor", "int", "float"}
    codes = {v.scalar_type for s in BundledFile(two[3]).suites.values() for c in s.test_cases
             for v in c.expected_outputs}
    assert codes == {6, 11}  # Float, Bool


def test_wrong_test_case_index_and_method_name_fail_as_in_executorch(executorch, sample):
    data = sample[1]
    assert len(BundledFile(data).suites["decode"].test_cases) == 5
    ours = pybindings._load_bundled_program_from_buffer(data)
    theirs = executorch._load_bundled_program_from_buffer(data)
    error = _both_fail(ours, theirs, "decode", 5)
    assert error.code == ErrorCode.InvalidArgument and "test case 5" in error.message and "'decode'" in error.message
    error = _both_fail(ours, theirs, "nope", 0)
    assert error.code == ErrorCode.InvalidArgument and "'nope'" in error.message
    with pytest.raises(TypeError):
        theirs.verify_result_with_bundled_expected_output("decode", -1)
    with pytest.raises(TypeError):
        ours.verify_result_with_bundled_expected_output("decode", -1)
    assert len(ours.verify_result_with_bundled_expected_output("decode", 4)) == 1  # still works


def test_a_method_without_test_cases_fails_as_in_executorch(executorch, two):
    exported, model, cases, _ = two
    data = bundling.bundle(exported.pte, {"forward": cases["forward"]})
    assert BundledFile(data).method_names == ("forward",)
    ours = pybindings._load_bundled_program_from_buffer(data)
    error = _both_fail(ours, executorch._load_bundled_program_from_buffer(data), "mix", 0)
    assert error.code == ErrorCode.InvalidArgument and "no test cases for method 'mix'" in error.message


def test_a_mismatching_output_fails_as_in_executorch_naming_the_worst_element(executorch, two):
    exported, model, cases, _ = two
    good_inputs, good_outputs = cases["forward"][0]
    wrong = good_outputs[0].clone()
    wrong[1, 2] += 0.5
    wrong[2, 0] += 0.25
    data = bundling.bundle(exported.pte, {"forward": [(good_inputs, [wrong, *good_outputs[1:]])] + cases["forward"]})
    ours = pybindings._load_bundled_program_from_buffer(data)
    error = _both_fail(ours, executorch._load_bundled_program_from_buffer(data), "forward", 0)
    assert error.code == ErrorCode.NotFound
    assert "test case 0: output 0" in error.message and "2 of 12 elements differ" in error.message
    assert "worst at [1, 2]" in error.message
    # A tolerance wide enough passes on both; the module goes on working.
    assert len(ours.verify_result_with_bundled_expected_output("forward", 0, atol=0.6)) == 3
    executorch._load_bundled_program_from_buffer(data).verify_result_with_bundled_expected_output("forward", 0,
                                                                                                  atol=0.6)
    assert len(ours.verify_result_with_bundled_expected_output("forward", 1)) == 3


def test_an_input_the_program_was_not_exported_with_fails_as_in_executorch(executorch, sample):
    exported, _ = sample
    _, model = bundling.sample()
    x, q, _ = bundling.sample_inputs(1, 7)[0]
    data = bundling.bundle(exported.pte, {"decode": [((x, q, 3), [model.decode(x, q, 3)])]})
    ours = pybindings._load_bundled_program_from_buffer(data)
    error = _both_fail(ours, executorch._load_bundled_program_from_buffer(data), "decode", 0)
    assert error.code == ErrorCode.NotSupported and "input 2" in error.message


def test_module_from_a_bundle_runs_its_methods_and_plan_execute_as_executorch(executorch, two):
    exported, model, cases, data = two
    ours = pybindings._load_for_executorch_from_bundled_program(pybindings._load_bundled_program_from_buffer(data))
    theirs = executorch._load_for_executorch_from_bundled_program(executorch._load_bundled_program_from_buffer(data))
    assert sorted(ours.method_names()) == sorted(theirs.method_names()) == ["forward", "mix"]
    # No inputs set yet: both refuse, with InvalidArgument.
    with pytest.raises(RuntimeError) as theirs_error:
        theirs.plan_execute("forward")
    with pytest.raises(PteError) as ours_error:
        ours.plan_execute("forward")
    assert int(ours_error.value.code) == _executorch_code(theirs_error.value) == ErrorCode.InvalidArgument
    inputs, _ = cases["forward"][0]
    for module in (ours, theirs):
        forward = module.forward(list(inputs))
        assert_matches(module.plan_execute("forward"), forward)
    assert_matches(ours.run_method("mix", list(cases["mix"][1][0])), theirs.run_method("mix", list(cases["mix"][1][0])))


def test_plan_execute_after_forward_reuses_inputs_kept_alive():
    # ExecuTorch keeps a pointer to an unplanned input's memory after forward returns, and plan_execute
    # reads it after the caller's tensor may be freed; pterun holds the tensor itself, so the run is safe.
    exported, model = bundling.two_methods(memory_planning_pass=_unplanned_inputs())
    inputs = bundling.two_methods_inputs(1, seed=3)
    data = bundling.bundle(exported.pte, {"forward": bundling.eager_cases(model, "forward", inputs["forward"])})
    module = pybindings._load_for_executorch_from_bundled_program(pybindings._load_bundled_program_from_buffer(data))
    assert not module.method_meta("forward").input_tensor_meta(0).is_memory_planned()
    expected = module.forward([inputs["forward"][0][0].clone()])
    gc.collect()
    torch.randn(3, 8)  # memory a freed input would be reused for
    assert_matches(module.plan_execute("forward"), expected)


def _unplanned_inputs():
    from executorch.exir.passes import MemoryPlanningPass

    return MemoryPlanningPass(alloc_graph_input=False)


def test_executorch_end_to_end_test_of_bundled_programs_passes_on_pterun(monkeypatch):
    upstream = pytest.importorskip("executorch.devtools.bundled_program.test.test_end2end")
    monkeypatch.setattr(upstream, "_load_bundled_program_from_buffer", pybindings._load_bundled_program_from_buffer)
    result = upstream.unittest.TextTestRunner(verbosity=0).run(
        upstream.unittest.defaultTestLoader.loadTestsFromTestCase(upstream.BundledProgramE2ETest))
    assert result.testsRun == 1 and result.wasSuccessful(), result.errors + result.failures


def test_cases_without_usable_expected_outputs_fail_as_in_executorch(executorch, two):
    exported, model, cases, _ = two
    inputs, outputs = cases["forward"][0]
    data = bundling.bundle(exported.pte, {"forward": [(inputs, []), (inputs, outputs)]})
    assert BundledFile(data).suites["forward"].test_cases[0].expected_outputs == ()
    ours = pybindings._load_bundled_program_from_buffer(data)
    error = _both_fail(ours, executorch._load_bundled_program_from_buffer(data), "forward", 0)
    assert error.code == ErrorCode.NotSupported and "no expected outputs" in error.message
    # Fewer expected outputs than the method has: ExecuTorch reads past the list; pterun says so.
    short = bundling.bundle(exported.pte, {"forward": [(inputs, outputs[:2])]})
    with pytest.raises(PteError, match="has 2 expected outputs; the method has 3") as error:
        pybindings._load_bundled_program_from_buffer(short).verify_result_with_bundled_expected_output("forward", 0)
    assert error.value.code == ErrorCode.InvalidProgram
    assert len(ours.verify_result_with_bundled_expected_output("forward", 1)) == 3


def test_etdump_switches_reach_the_module_as_with_the_other_loaders(executorch, two, tmp_path):
    _, _, cases, data = two
    inputs, _ = cases["forward"][0]
    for runtime in (pybindings, executorch):
        bundle = runtime._load_bundled_program_from_buffer(data)
        assert not runtime._load_for_executorch_from_bundled_program(bundle).has_etdump()
        module = runtime._load_for_executorch_from_bundled_program(bundle, None, True, 1 << 16)
        assert module.has_etdump()
        module.forward(list(inputs))
        path = tmp_path / f"{runtime.__name__}.etdp"
        module.write_etdump_result_to_file(str(path), str(tmp_path / f"{runtime.__name__}.bin"))
        assert path.stat().st_size > 0
