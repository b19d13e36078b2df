"""`pterun run` and `pterun inspect`, on the bundled example and on error."""

from __future__ import annotations

import pickle
import sys

import pytest
import torch
from typer.testing import CliRunner

import pterun
from pterun.cli.main import app
from pterun.cli.options import example_program
from pterun.cli.report import UserError
from pterun.errors import AccessFailed
from tests.executor import programs
from tests.support.compare import assert_matches
from tests.support.oracle import run_reference

runner = CliRunner()


def test_run_with_no_argument_runs_the_bundled_example():
    result = runner.invoke(app, ["run", "--repeat", "2", "--warmup", "0"])
    assert result.exit_code == 0, result.output
    assert "llama_tiny.pte" in result.output and "float32" in result.output
    assert "execute median" in result.output and "[1, 64, 1024]" in result.output


def test_run_reads_inputs_from_a_file(tmp_path):
    tokens = torch.randint(0, 1024, (1, 9))
    torch.save([tokens], tmp_path / "tokens.pt")
    result = runner.invoke(app, ["run", "--inputs", str(tmp_path / "tokens.pt"), "-n", "1", "--warmup", "0"])
    assert result.exit_code == 0, result.output
    assert "[1, 9, 1024]" in result.output


def test_inspect_shows_methods_operators_and_arenas():
    result = runner.invoke(app, ["inspect", str(example_program())])
    assert result.exit_code == 0, result.output
    for fragment in ("method forward", "input 0", "Long", "aten::mm.out", "memory arena 1", "on cpu", "delegates"):
        assert fragment in result.output


def test_errors_are_reported_with_their_code(tmp_path):
    bad = tmp_path / "bad.pte"
    bad.write_bytes(b"\0" * 64)
    result = runner.invoke(app, ["inspect", str(bad)])
    assert result.exit_code == 1
    assert "InvalidProgram 0x23" in result.output


def test_bundled_example_matches_executorch_at_several_lengths():
    method = pterun.Runtime.get().load_program(example_program()).load_method("forward")
    generator = torch.Generator().manual_seed(1)
    for length in (1, 7, 64):
        tokens = torch.randint(0, 1024, (1, length), generator=generator)
        assert_matches(method.execute([tokens]), run_reference(example_program(), [tokens]))


# -- a user's mistakes: one line, naming the file or option ------------------------------------


class _Opaque:
    """Something torch.load(weights_only=True) refuses to unpickle."""


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A current directory holding the files the cases below name."""
    monkeypatch.chdir(tmp_path)
    torch.save({"a": "text"}, "strings.pt")
    with open("opaque.pt", "wb") as f:
        pickle.dump(_Opaque(), f)
    (tmp_path / "notzip.npz").write_bytes(b"these bytes are not a zip archive")
    torch.save([torch.ones(3, 3), torch.ones(2, 3)], "wrong_shape.pt")
    (tmp_path / "adir").mkdir()
    (tmp_path / "cli_models_here.py").write_text(
        "import torch\n\n"
        "class AddMul(torch.nn.Module):\n"
        "    def forward(self, x, y):\n"
        "        return x + y, x * y\n\n"
        "def add_mul():\n    return AddMul()\n\n"
        "def linear():\n    return torch.nn.Linear(3, 3)\n\n"
        "def not_a_module():\n    return 42\n"
    )
    yield tmp_path
    sys.modules.pop("cli_models_here", None)


def _cases() -> dict:
    pte = str(programs.add_mul().pte)
    bench = ["bench", pte, "-n", "1", "--warmup", "0", "--against", "eager"]
    return {
        "missing inputs": (["run", pte, "--inputs", "missing.pt"], "--inputs 'missing.pt'", "no such file"),
        "inputs of strings": (["run", pte, "--inputs", "strings.pt"], "--inputs 'strings.pt'", "a dict holding a str"),
        "inputs not tensors": (["run", pte, "--inputs", "opaque.pt"], "--inputs 'opaque.pt'", "torch.save"),
        "npz not a zip": (["run", pte, "--inputs", "notzip.npz"], "--inputs 'notzip.npz'", "not an .npz archive"),
        "program as inputs": (["run", pte, "--inputs", pte], f"--inputs {pte!r}", "ExecuTorch program"),
        "directory as inputs": (["run", pte, "--inputs", "adir"], "--inputs 'adir'", "directory"),
        "inputs of a wrong shape": (["run", pte, "--inputs", "wrong_shape.pt"], "input 0", "[3, 3]"),
        "no such model module": ([*bench, "--model", "nosuchmod:f"], "--model 'nosuchmod:f'", "nosuchmod"),
        "model needs arguments": ([*bench, "--model", "torch.nn:Linear"], "--model 'torch.nn:Linear'", "Linear()"),
        "model not a module": ([*bench, "--model", "cli_models_here:not_a_module"], "--model", "not a torch.nn.Module"),
        "model not found": ([*bench, "--model", "cli_models_here:nothing"], "--model", "no function 'nothing'"),
        "model does not fit": ([*bench, "--model", "cli_models_here:linear"], "--model", "does not run on the program"),
        "model not given": (bench, "--model", "--against eager"),
        "unknown way": (["bench", pte, "--against", "nope"], "--against", "'nope'"),
        "missing program": (["run", "missing.pte"], "program file 'missing.pte'", "does not exist"),
        "directory as program": (["inspect", "adir"], "program file 'adir'", "is a directory"),
        "missing data file": (["run", pte, "--data", "missing.ptd"], "data file 'missing.ptd'", "does not exist"),
        "not a device": (["run", pte, "--device", "gpu"], "--device 'gpu'", "not a device"),
        "unknown method": (["run", pte, "--method", "nope"], "'nope'", "InvalidArgument"),
        "a scalar input": (["run", str(programs.scaled().pte)], "input 1", "--inputs"),
    }


def _assert_one_error_line(result, *fragments) -> str:
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    for fragment in fragments:
        assert fragment in lines[0], f"{fragment!r} not in {lines[0]!r}"
    assert "Traceback" not in result.output and "file file" not in result.output
    return lines[0]


@pytest.mark.parametrize("case", sorted(_cases()))
def test_a_mistake_is_one_error_line_naming_the_culprit(case, workdir):
    args, *fragments = _cases()[case]
    _assert_one_error_line(runner.invoke(app, args), *fragments)


def test_cuda_on_a_machine_without_it_is_one_error_line(workdir):
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    result = runner.invoke(app, ["run", str(programs.add_mul().pte), "--device", "cuda"])
    _assert_one_error_line(result, "--device 'cuda'", "no CUDA device")


def test_bench_imports_the_model_from_the_current_directory(workdir):
    import os

    assert str(workdir) not in sys.path and os.getcwd() == str(workdir)  # the premise: only the cwd has it
    result = runner.invoke(app, ["bench", str(programs.add_mul().pte), "-n", "2", "--warmup", "0",
                                 "--against", "eager", "--model", "cli_models_here:add_mul"])
    assert result.exit_code == 0, result.output
    assert "eager" in result.output and "pterun" in result.output
    assert str(workdir) not in sys.path


def test_debug_shows_the_traceback_instead(workdir, monkeypatch):
    for args, env in ((["--debug", "run", "missing.pte"], {}), (["run", "missing.pte"], {"PTERUN_DEBUG": "1"})):
        result = runner.invoke(app, args, env=env)
        assert result.exit_code == 1
        assert isinstance(result.exception, AccessFailed) and "missing.pte" in str(result.exception)
        assert not result.output.startswith("error:")
    result = runner.invoke(app, ["--debug", "run", str(programs.add_mul().pte), "--inputs", "strings.pt"])
    assert isinstance(result.exception, UserError) and "strings.pt" in str(result.exception)


def test_an_unexpected_failure_is_one_line_too(workdir, monkeypatch):
    from pterun.cli import run as run_command

    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(run_command, "drawn_inputs", broken)
    pte = str(programs.add_mul().pte)
    _assert_one_error_line(runner.invoke(app, ["run", pte]), "unexpected ZeroDivisionError: a bug", "--debug")
    assert isinstance(runner.invoke(app, ["--debug", "run", pte]).exception, ZeroDivisionError)


# -- names from a file reach the terminal escaped ----------------------------------------------

HOSTILE_METHOD = "\x1b]0;PWNED\x07[/bold]fwd"
HOSTILE_OPERATOR = "aten::\x1b[31m[/red]"
HOSTILE_BACKEND = "\x1b[2J[/b]Backend"


def _visible(text: str) -> str:
    return text.encode("unicode_escape").decode("ascii")


def _hostile_program(tmp_path, *, delegate: bool = True):
    from tests.format import build
    from tests.format.build import Tensor, identity

    plans = [
        identity(name=HOSTILE_METHOD),
        identity(name="ops", values=[Tensor(memory=(1, 0)), ("int", 1), Tensor(memory=(1, 8))], outputs=[2],
                 buffer_sizes=[0, 16], instructions=[("kernel", 0, [0, 0, 1, 2, 2])],
                 operators=[(HOSTILE_OPERATOR, "out")]),
    ]
    if delegate:
        plans.append(identity(name="deleg", delegates=[(HOSTILE_BACKEND, 0, 0)], instructions=[("delegate", 0, [0])]))
    path = tmp_path / "hostile.pte"
    path.write_bytes(build.program(plans, delegate_data=[b""]))
    return path


def _assert_no_raw_controls(output: str) -> None:
    assert not any(ch in output for ch in "\x1b\x07"), repr(output)


def test_inspect_shows_names_from_the_file_escaped(tmp_path):
    path = _hostile_program(tmp_path)
    meta = pterun.Runtime.get().load_program(path)
    assert HOSTILE_METHOD in meta.method_names  # the premise: the names are in the file as written
    result = runner.invoke(app, ["inspect", str(path)])
    assert result.exit_code == 0, result.output
    _assert_no_raw_controls(result.output)
    flat = result.output.replace("\n", "")
    for name in (HOSTILE_METHOD, f"{HOSTILE_OPERATOR}.out", HOSTILE_BACKEND):
        assert _visible(name) in flat, (name, result.output)


def test_run_and_code_show_names_from_the_file_escaped(tmp_path):
    path = _hostile_program(tmp_path, delegate=False)
    result = runner.invoke(app, ["run", str(path), "--method", HOSTILE_METHOD, "-n", "1", "--warmup", "0"])
    assert result.exit_code == 0, result.output
    _assert_no_raw_controls(result.output)
    assert _visible(HOSTILE_METHOD) in result.output
    result = runner.invoke(app, ["inspect", "--code", str(path)])
    _assert_no_raw_controls(result.output)
    assert "def __make" in result.output  # the first method's code; then method 'ops' cannot compile
    assert result.exit_code == 1
    last = result.output.splitlines()[-1]
    assert last.startswith("error: ") and _visible(HOSTILE_OPERATOR) in last and "OperatorMissing" in last


def test_errors_quoting_names_from_the_file_are_escaped(tmp_path):
    path = _hostile_program(tmp_path)
    for method, name in (("ops", HOSTILE_OPERATOR), ("deleg", HOSTILE_BACKEND)):
        result = runner.invoke(app, ["run", str(path), "--method", method])
        _assert_no_raw_controls(result.output)
        _assert_one_error_line(result, f"method '{method}'", _visible(name))


def test_run_takes_allow_tf32_and_computes_the_same_on_the_cpu():
    # TF32 exists only on CUDA: on the CPU the option changes nothing, and is accepted.
    plain = runner.invoke(app, ["run", "-n", "1", "--warmup", "0"])
    tf32 = runner.invoke(app, ["run", "-n", "1", "--warmup", "0", "--allow-tf32"])
    assert plain.exit_code == 0 and tf32.exit_code == 0, tf32.output
    rows = [line for line in plain.output.splitlines() if "Tensor" in line]
    assert rows and rows == [line for line in tf32.output.splitlines() if "Tensor" in line]
