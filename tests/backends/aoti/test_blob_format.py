"""What CudaBackend reads from a blob before it loads anything: ExecuTorch's weight manifest, written by
ExecuTorch's own encoder, and a library's ELF image (its symbols, DT_NEEDED entries and GPU kernels)."""

from __future__ import annotations

import os

import pytest
import torch

from pterun.backends.aoti.elf import Kernel, read_library
from pterun.backends.aoti.manifest import Manifest, Weight, read_manifest
from pterun.errors import DelegateInvalidCompatibility, InvalidProgram
from tests.support import aoti_programs as ap


def test_the_manifest_reads_back_what_executorchs_encoder_wrote():
    from executorch.backends.cuda.cuda_weight_collector import CudaWeightEntry, encode_cuda_weight_metadata

    entries = [
        CudaWeightEntry("layers.0.w", "cuda_fqn_weight:cuda:layers.0.w", 96, 15, 1, 4, (2, 3), (1, 4)),
        CudaWeightEntry("_tensor_constant0", "cuda_fqn_weight:cpu:lib:_tensor_constant0", 8, 4, 0, 0, (), ()),
    ]
    manifest = read_manifest(encode_cuda_weight_metadata(ap.LIBRARY_KEY, entries), "forward")
    assert manifest == Manifest(ap.LIBRARY_KEY, (
        Weight("layers.0.w", "cuda_fqn_weight:cuda:layers.0.w", 96, 15, 1, 4, (2, 3), (1, 4)),
        Weight("_tensor_constant0", "cuda_fqn_weight:cpu:lib:_tensor_constant0", 8, 4, 0, 0, (), ()),
    ))
    assert manifest.weights[0].needed == (4 + 1 * 1 + 2 * 4 + 1) * 2  # bfloat16 elements up to the last one


def test_older_exports_are_recognized_by_their_keys():
    assert read_manifest(b"", "forward") == Manifest("forward_so_blob", (), dense_weights="forward_weights_blob")
    assert read_manifest(b"lib_so_blob\nw_weights_blob", "forward") == Manifest("lib_so_blob", (), "w_weights_blob")


@pytest.mark.parametrize("blob, fragment", [
    (ap.manifest([ap.WeightSpec()])[:12], "inside a field"),
    (b"ETCUDAFQN3" + (2**31).to_bytes(4, "little"), "past the manifest's end"),
    (ap.manifest([ap.WeightSpec(), ap.WeightSpec()]), "listed twice"),
    (ap.manifest([ap.WeightSpec(dtype=9)]), "dtype 9"),
    (ap.manifest([ap.WeightSpec()], library_key=""), "names no library"),
    (b"\xff\xfe\nabc", "neither ExecuTorch's weight manifest"),
])
def test_a_malformed_manifest_is_an_invalid_program(blob, fragment):
    with pytest.raises(InvalidProgram) as caught:
        read_manifest(blob, "forward")
    assert fragment in str(caught.value)


def test_a_real_shared_object_reads_as_one():
    path = os.path.join(os.path.dirname(torch.__file__), "lib", "libc10.so")
    with open(path, "rb") as file:
        library = read_library(file.read())
    assert library.defined and library.needed and not library.kernels


def test_the_library_written_for_the_tests_reads_back():
    library = read_library(ap.elf_library(needed=("libcuda.so.1", "libm.so.6")))
    assert library.needed == ("libcuda.so.1", "libm.so.6")
    assert set(ap.CONTAINER_API) <= library.defined and library.undefined == {"aoti_torch_empty_strided"}
    assert library.kernels == {frozenset({Kernel(False, 90), Kernel(True, 90)})}


@pytest.mark.parametrize("images, sm, runs", [
    (((False, 90),), 90, True),
    (((False, 80),), 86, True),  # machine code runs on later minor versions of its major one
    (((False, 86),), 80, False),
    (((False, 90),), 100, False),  # nor on another major architecture
    (((False, 90), (True, 90)), 100, True),  # where PTX is there for the driver to compile
    (((True, 90),), 80, False),
])
def test_kernels_are_checked_against_the_gpu(images, sm, runs):
    library = read_library(ap.elf_library(kernels=images))
    if runs:
        library.check_runs_on(sm)
        return
    with pytest.raises(DelegateInvalidCompatibility) as caught:
        library.check_runs_on(sm)
    assert f"this GPU is sm_{sm}" in str(caught.value)
