"""An XNNPACK delegate gives back the file pages it packed from, as ExecuTorch's XNNPACK frees its buffers."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import torch

import pterun
from tests.backends.xnnpack.programs import partitioners
from tests.support.exporting import ExportSpec, export_program

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/smaps")


class Wide(torch.nn.Module):
    """Four 512x512 float layers: 4 MiB of weights, packed at load for products of 2^21 multiply-adds."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.Sequential(*(torch.nn.Linear(512, 512) for _ in range(4)))

    def forward(self, x):
        return self.layers(x)


def export_wide():
    def make():
        torch.manual_seed(0)
        return ExportSpec(Wide(), (torch.randn(8, 512),), lower=partitioners)

    return export_program("xnnpack-memory-wide", make)


def resident(path: Path) -> int:
    """Bytes of ``path``'s mappings in this process's memory."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            fields = line.split(maxsplit=5)
            if re.fullmatch(r"[0-9a-f]+-[0-9a-f]+", fields[0]):  # a mapping's first line
                inside = len(fields) == 6 and fields[5].rstrip("\n") == str(path)
            elif inside and fields[0] == "Rss:":
                total += int(fields[1]) * 1024
    return total


def test_packed_weights_pages_are_given_back_and_results_stay_exact():
    exported = export_wide()
    size = exported.pte.stat().st_size
    assert size > 4 * 2**20  # premise: the weights are in the file, so reading them maps 4 MiB of it
    inputs = list(exported.forward_inputs())
    method = pterun.Runtime.get().load_program(exported.pte).load_method("forward")
    assert resident(exported.pte) < size // 4, f"{resident(exported.pte)} of {size} bytes resident after load"
    (out,) = method.execute(inputs)
    # The same program from bytes (nothing to give back) computes the same.
    (expected,) = pterun.Runtime.get().load_program(exported.pte.read_bytes()).load_method("forward").execute(inputs)
    assert torch.equal(out, expected)
    assert torch.equal(method.execute(inputs)[0], expected)
