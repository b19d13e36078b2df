"""BundledFile: the .bpte reader, on bundles ExecuTorch's devtools write, and on broken ones."""

from __future__ import annotations

import importlib.util
import random
import subprocess
from pathlib import Path

import pytest
import torch

pytest.importorskip("executorch.devtools.bundled_program.core")

from pterun import pybindings  # noqa: E402
from pterun.bundled.program import to_tensor  # noqa: E402
from pterun.errors import ErrorCode, InvalidProgram, NotSupported, PteError  # noqa: E402
from pterun.format._generated import bundled_program_layout  # noqa: E402
from pterun.format.bundled import BundledFile, BundledTensor  # noqa: E402
from tests.support import bundling  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sample():
    exported, model = bundling.sample()
    cases = {name: bundling.eager_cases(model, name, bundling.sample_inputs(3, seed))
             for seed, name in enumerate(model.method_names)}
    return exported, cases, bundling.bundle(exported.pte, cases)


def _regen():
    spec = importlib.util.spec_from_file_location("regen_schema", ROOT / "scripts" / "regen-schema.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _strip(layout: dict, namespace: str) -> dict:
    """A layout with the namespaces left out of table and union names: they are not on the wire."""
    def name(text):
        return text.rsplit(".", 1)[-1] if isinstance(text, str) else text

    tables = {name(t): tuple((f, v, k, (tuple(name(a) for a in arg) if isinstance(arg, tuple) else name(arg)), r)
                             for f, v, k, arg, r in fields) for t, fields in layout["TABLES"].items()}
    unions = {name(u): {i: name(m) for i, m in members.items()} for u, members in layout["UNIONS"].items()}
    return {"ROOT": name(layout["ROOT"]), "IDENT": layout["IDENT"], "TABLES": tables, "UNIONS": unions}


def test_schema_is_wire_identical_to_executorchs(tmp_path):
    import executorch.devtools.bundled_program.schema as schema_package

    regen = _regen()
    theirs_fbs = Path(schema_package.__file__).parent / "bundled_program_schema.fbs"
    assert theirs_fbs.exists()
    flatc = regen.find_flatc()
    reflection = regen.load_reflection(flatc, tmp_path)
    subprocess.run([flatc, "--binary", "--schema", "-I", str(theirs_fbs.parent), "-o", str(tmp_path),
                    str(theirs_fbs)], check=True)
    schema = reflection.Schema.GetRootAs((tmp_path / "bundled_program_schema.bfbs").read_bytes(), 0)
    theirs = _strip(regen.layout_of(schema), "bundled_program_flatbuffer")
    ours = _strip({k: getattr(bundled_program_layout, k) for k in ("ROOT", "IDENT", "TABLES", "UNIONS")}, "bpte")
    assert len(theirs["TABLES"]) == 8
    # Field names are ours to choose only where the wire does not see them; these match ExecuTorch's too.
    assert ours == theirs


def test_reader_agrees_with_executorchs_deserializer(sample):
    from executorch.devtools.bundled_program.schema import Tensor
    from executorch.devtools.bundled_program.serialize import deserialize_from_flatbuffer_to_bundled_program

    exported, cases, data = sample
    theirs = deserialize_from_flatbuffer_to_bundled_program(data)
    ours = BundledFile(data)
    assert ours.version == theirs.version
    assert bytes(ours.program) == bytes(theirs.program) == exported.pte.read_bytes()
    assert list(ours.method_names) == [s.method_name for s in theirs.method_test_suites] == ["decode", "encode"]
    for suite in theirs.method_test_suites:
        mine = ours.suites[suite.method_name].test_cases
        assert len(mine) == len(suite.test_cases) == 3
        for case, their_case in zip(mine, suite.test_cases):
            for values, their_values in ((case.inputs, their_case.inputs),
                                         (case.expected_outputs, their_case.expected_outputs)):
                assert len(values) == len(their_values)
                for value, their in zip(values, their_values):
                    if isinstance(their.val, Tensor):
                        assert isinstance(value, BundledTensor)
                        assert (value.scalar_type, list(value.sizes), list(value.dim_order), bytes(value.data)) == (
                            int(their.val.scalar_type), their.val.sizes, their.val.dim_order, bytes(their.val.data))
                    else:
                        assert value == their.val.int_val and type(value) is int


def test_tensors_come_back_equal_in_any_dim_order(sample):
    exported, cases, _ = sample
    x = torch.arange(2 * 3 * 4 * 5, dtype=torch.float32).reshape(2, 3, 4, 5).contiguous(
        memory_format=torch.channels_last)

    def channels_last(schema):
        # ExecuTorch's serializer makes every tensor contiguous (dim order 0, 1, 2, 3); a writer that keeps
        # the layout writes the bytes in channels-last order and says so in the dim order.
        tensor = _first_input(schema, 0)
        assert list(tensor.dim_order) == [0, 1, 2, 3]
        tensor.dim_order = [0, 2, 3, 1]
        tensor.data = x.permute(0, 2, 3, 1).contiguous().numpy().tobytes()

    data = bundling.bundle(exported.pte, {"decode": [((x,), [x])]}, edit=channels_last)
    value = BundledFile(data).suites["decode"].test_cases[0].inputs[0]
    assert value.dim_order == (0, 2, 3, 1) and bytes(value.data) == x.permute(0, 2, 3, 1).numpy().tobytes()
    tensor = to_tensor(value)
    assert torch.equal(tensor, x) and tensor.stride() == x.stride()


def test_a_program_or_other_bytes_is_not_a_bundled_program(sample):
    exported, _, _ = sample
    with pytest.raises(NotSupported, match=r"is a program \(.pte.*not a bundled program"):
        BundledFile(exported.pte)
    with pytest.raises(NotSupported, match="not a bundled program: its file identifier is b'abcd'; expected b'BP08'"):
        pybindings._load_bundled_program_from_buffer(b"\0\0\0\0abcd" + bytes(64))
    with pytest.raises(InvalidProgram, match="is 3 bytes"):
        pybindings._load_bundled_program_from_buffer(b"abc")


def _first_input(schema, case: int = 1):
    return schema.method_test_suites[0].test_cases[case].inputs[0].val


@pytest.mark.parametrize("edit, message", [
    (lambda s: setattr(_first_input(s), "data", _first_input(s).data[:10]),
     r"method 'decode', test case 1, input 0: sizes \[2, 2\] need 16 bytes; its data holds 10"),
    (lambda s: setattr(_first_input(s), "dim_order", [1, 1]),
     r"method 'decode', test case 1, input 0: dim order \[1, 1\] is not a permutation"),
    (lambda s: setattr(_first_input(s), "scalar_type", 19),
     "method 'decode', test case 1, input 0: scalar type 19 is not one a tensor can have"),
    (lambda s: setattr(s, "program", b""), "holds no program"),
    (lambda s: s.method_test_suites.append(s.method_test_suites[0]), "method 'decode' has a test suite already"),
])
def test_inconsistent_bundles_are_invalid_programs_naming_the_value(sample, edit, message):
    exported, cases, _ = sample
    data = bundling.bundle(exported.pte, cases, edit=edit)
    with pytest.raises(InvalidProgram, match=message):
        pybindings._load_bundled_program_from_buffer(data)


def test_truncated_bundles_fail_with_typed_errors(sample):
    data = sample[2]
    assert BundledFile(data).method_names  # the whole file reads
    for size in range(0, len(data), 97):
        with pytest.raises(PteError) as error:
            BundledFile(data[:size])
        assert error.value.code in (ErrorCode.InvalidProgram, ErrorCode.NotSupported), (size, error.value)


def test_flipped_bytes_never_fail_with_anything_but_typed_errors(sample):
    # A fixed budget of random corruptions: reading, loading the program and running a test case either
    # work or raise a PteError; and a good bundle still runs afterwards.
    data = sample[2]
    assert len(pybindings._load_bundled_program_from_buffer(data).verify_result_with_bundled_expected_output(
        "decode", 0)) == 1
    rng = random.Random(12)
    outcomes = {"read": 0, "rejected": 0}
    for _ in range(300):
        corrupt = bytearray(data)
        for _ in range(rng.randint(1, 4)):
            corrupt[rng.randrange(len(corrupt))] = rng.randrange(256)
        try:
            module = pybindings._load_bundled_program_from_buffer(bytes(corrupt))
            module.verify_result_with_bundled_expected_output("decode", 0)
            outcomes["read"] += 1
        except PteError:
            outcomes["rejected"] += 1
    assert outcomes["read"] and outcomes["rejected"], outcomes
    good = pybindings._load_bundled_program_from_buffer(data)
    assert len(good.verify_result_with_bundled_expected_output("encode", 2)) == 1
