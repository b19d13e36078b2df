"""ExecuTorch's CudaBackend delegates are native code: refused without the caller's trust, and with it,
checked before anything is loaded or allocated, on any machine.

The programs are laid out as ExecuTorch's CUDA export lays them out (tests/support/aoti_programs.py): the
delegate's blob is ExecuTorch's own weight manifest, the library an ELF shared object in the program's
named data, the weights in a .ptd, the delegate's inputs and outputs in a CUDA-tagged arena. Each program
here plans that arena at 2**60 bytes: had anything been allocated before the refusal, the load would fail
with MemoryAllocationFailed instead, on a GPU machine as on a CPU-only one. After every refusal the program
still loads its other method and runs it.
"""

from __future__ import annotations

import pytest
import torch
from typer.testing import CliRunner

import pterun
from pterun import pybindings
from pterun.cli.main import app
from pterun.errors import (
    DelegateInvalidCompatibility,
    ErrorCode,
    InvalidExternalData,
    InvalidProgram,
    NativeCodeNotTrusted,
    NotFound,
    PteError,
)
from tests.support import aoti_programs as ap

HUGE = 1 << 60


def _program(**options) -> tuple[bytes, bytes]:
    pte, ptd = ap.program(arena=HUGE, **options)
    plan = pterun.format.ProgramFile(pte).plan("forward")
    assert plan.buffer_devices.get(1) == (1, 0) and plan.buffer_sizes[1] == HUGE, "premise: a huge CUDA arena"
    assert [d.backend_id for d in plan.delegates] == ["CudaBackend"]
    return pte, ptd


def _still_works(program) -> None:
    x = torch.tensor([1.0, 2.0])
    assert torch.equal(program.load_method("plain").execute([x])[0], x)


def test_a_cuda_backend_program_is_refused_without_trust():
    pte, ptd = _program()
    program = pterun.Runtime.get().load_program(pte, data_path=[ptd])
    for _ in range(2):  # the same refusal each time: nothing was half loaded
        with pytest.raises(NativeCodeNotTrusted) as caught:
            program.load_method("forward")
        error = caught.value
        assert error.code == ErrorCode.NotSupported and isinstance(error, PteError)
        for fragment in ("method 'forward'", "delegate 'CudaBackend'", "trust_native_code=True", "native code"):
            assert fragment in str(error), f"{fragment!r} not in {error}"
    _still_works(program)


def test_trust_lets_the_load_go_on_to_the_machine():
    pte, ptd = _program()
    program = pterun.Runtime.get().load_program(pte, data_path=[ptd], trust_native_code=True)
    with pytest.raises(PteError) as caught:
        program.load_method("forward")
    assert not isinstance(caught.value, NativeCodeNotTrusted)
    if not torch.cuda.is_available():
        assert isinstance(caught.value, NotFound) and "not available on this machine" in str(caught.value)
    _still_works(program)


def test_pybindings_loaders_refuse_without_trust_and_take_it_as_a_keyword():
    pte, ptd = _program()
    module = pybindings._load_for_executorch_from_buffer(pte, ptd)
    with pytest.raises(NativeCodeNotTrusted) as caught:
        module.forward([torch.ones(2)])
    assert "trust_native_code" in str(caught.value) and caught.value.code == ErrorCode.NotSupported
    program = pybindings._load_program_from_buffer(pte, data_path=None)
    with pytest.raises(NativeCodeNotTrusted):
        program.load_method("forward")
    trusted = pybindings._load_for_executorch_from_buffer(pte, ptd, trust_native_code=True)
    with pytest.raises(PteError) as caught:
        trusted.forward([torch.ones(2)])
    assert not isinstance(caught.value, NativeCodeNotTrusted)
    assert torch.equal(module.run_method("plain", [torch.ones(2)])[0], torch.ones(2))


def test_the_command_line_refuses_in_one_line_and_takes_the_option(tmp_path):
    pte, ptd = _program()
    (tmp_path / "p.pte").write_bytes(pte)
    (tmp_path / "w.ptd").write_bytes(ptd)
    runner = CliRunner()
    args = ["run", str(tmp_path / "p.pte"), "--data", str(tmp_path / "w.ptd"), "--repeat", "1", "--warmup", "0"]
    result = runner.invoke(app, args)
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "--trust-native-code" in lines[0] and "CudaBackend" in lines[0] and "NotSupported" in lines[0]
    trusted = runner.invoke(app, [*args, "--trust-native-code"])
    assert "--trust-native-code" not in trusted.output and "NotSupported" not in trusted.output, trusted.output
    plain = runner.invoke(app, ["run", str(tmp_path / "p.pte"), "--method", "plain", "--repeat", "1"])
    assert plain.exit_code == 0, plain.output


def _weights(**overrides) -> list[ap.WeightSpec]:
    return [ap.WeightSpec(**overrides)]


BAD_BLOBS = {
    "not an ELF image": (dict(library=b"#!/bin/sh\necho hostile\n" * 4), DelegateInvalidCompatibility,
                         "not an ELF shared object"),
    "a library for another processor": (dict(library=ap.elf_library(machine=ap.AARCH64)),
                                        DelegateInvalidCompatibility, "built for AArch64"),
    "an executable, not a shared object": (dict(library=ap.elf_library(elf_type=2)), DelegateInvalidCompatibility,
                                           "not a shared object"),
    "a truncated ELF image": (dict(library=ap.elf_library()[:200]), DelegateInvalidCompatibility,
                              "outside its 200 bytes"),
    "a library key that names nothing": (dict(library_key="f" * 64 + "_so_blob"), InvalidProgram,
                                         "neither the program's named data nor its data files"),
    "a short weight": (dict(weights=_weights(stored_nbytes=64)), InvalidExternalData,
                       "is 16 bytes; its manifest says 64"),
    "a weight key that names nothing": (dict(weights=_weights(key="cuda_fqn_weight:cuda:elsewhere")), None, None),
    "a view past its storage": (dict(weights=_weights(sizes=(4, 4))), InvalidProgram, "reaches 64 bytes of its 16"),
    "a truncated manifest": (dict(blob=ap.manifest(_weights())[:-9]), InvalidProgram, "the manifest ends at byte"),
    "bytes after the manifest": (dict(blob=ap.manifest(_weights()) + b"\0"), InvalidProgram, "1 bytes follow"),
    "a blob that is no manifest": (dict(blob=b"\x89PNG\r\n\x1a\n" + bytes(32)), InvalidProgram,
                                   "neither ExecuTorch's weight manifest"),
    "an older export's dense weights": (dict(blob=f"{ap.LIBRARY_KEY}\nabc_weights_blob".encode()),
                                        DelegateInvalidCompatibility, "one dense blob"),
}


@pytest.mark.parametrize("case", sorted(BAD_BLOBS))
def test_a_bad_blob_is_a_typed_error_before_anything_loads(case):
    options, error, fragment = BAD_BLOBS[case]
    if error is None:  # the manifest names a key the .ptd lacks
        error, fragment = InvalidExternalData, "which no data file or named data holds"
    pte, ptd = _program(**options)
    if case == "a weight key that names nothing":
        ptd = ap.program()[1]  # the weights stored under their usual keys
    program = pterun.Runtime.get().load_program(pte, data_path=[ptd], trust_native_code=True)
    with pytest.raises(error) as caught:
        program.load_method("forward")
    assert type(caught.value) is error, f"{type(caught.value).__name__}: {caught.value}"
    message = str(caught.value)
    assert "method 'forward' delegate 'CudaBackend'" in message and fragment in message, message
    _still_works(program)


def test_weights_are_looked_for_in_the_data_files_given():
    pte, _ = _program()
    program = pterun.Runtime.get().load_program(pte, trust_native_code=True)
    with pytest.raises(InvalidExternalData) as caught:
        program.load_method("forward")
    assert "'lin.weight'" in str(caught.value) and "data_path" in str(caught.value)


def test_a_compile_spec_naming_another_device_is_refused():
    pte, ptd = ap.program(arena=HUGE, target_device=b"cpu")
    program = pterun.Runtime.get().load_program(pte, data_path=[ptd], trust_native_code=True)
    with pytest.raises(DelegateInvalidCompatibility) as caught:
        program.load_method("forward")
    assert "compiled for cpu, not a CUDA device" in str(caught.value)
