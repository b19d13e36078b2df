"""The VulkanBackend blob reader, the backend's registration and availability, and its load-time errors."""

from __future__ import annotations

import random
import struct
import subprocess
import sys

import pytest

import pterun
from pterun.backends import default_backend_registry
from pterun.backends.interface import BackendInitContext
from pterun.backends.webgpu import NAME, WebGPUBackend, device
from pterun.backends.webgpu.blob import HEADER_MAGIC, split_blob
from pterun.backends.webgpu.graph import TensorValue, read_graph
from pterun.errors import DelegateInvalidCompatibility, ErrorCode, InvalidProgram, NotFound, PteError
from pterun.format import ProgramFile
from tests.backends.webgpu.adapter import needs_adapter
from tests.backends.webgpu.programs import export


@pytest.fixture(scope="module")
def mlp():
    return export("swiglu", True)


def _blob(pte) -> bytes:
    program = ProgramFile(pte)
    (d,) = program.plan("forward").delegates
    assert d.backend_id == NAME
    return bytes(program.delegate_data(d.inline, d.index))


def test_blob_layout(mlp):
    blob = _blob(mlp.pte)
    magic, length, fb_offset, _, const_offset, const_size = struct.unpack_from("<4sHIIIQ", blob, 4)
    assert magic == HEADER_MAGIC and length == 30 and fb_offset == 32 and const_offset % 16 == 0
    parts = split_blob(blob)
    assert bytes(parts.flatbuffer[4:8]) == b"VK00" and len(parts.constants) == const_size
    graph = read_graph(parts)
    assert [op.name for op in graph.chain].count("aten.linear.default") == 3
    assert len(graph.inputs) == 1 and len(graph.outputs) == 1
    weights = [v for v in graph.values if isinstance(v, TensorValue) and v.is_constant]
    assert sorted(v.dims for v in weights) == [(48, 136), (136, 48), (136, 48)]
    # The exporter keeps the weights in the program's named data, keyed by their hash.
    assert all(c.named_key and len(c.named_key) == 64 for c in graph.constants)


@pytest.mark.parametrize(
    "damage,error",
    [
        (lambda b: b[:20], DelegateInvalidCompatibility),  # shorter than the header
        (lambda b: b[:4] + b"XH00" + b[8:], DelegateInvalidCompatibility),  # another backend's magic
        (lambda b: b[:8] + struct.pack("<H", 28) + b[10:], InvalidProgram),  # header length
        (
            lambda b: b[:14] + struct.pack("<I", len(b)) + b[18:],
            InvalidProgram,
        ),  # flatbuffer runs past the end
        (
            lambda b: b[:22] + struct.pack("<Q", 1 << 40) + b[30:],
            InvalidProgram,
        ),  # constants run past the end
        (lambda b: b[:36] + b"VK99" + b[40:], DelegateInvalidCompatibility),  # graph identifier
        (lambda b: b[:32] + struct.pack("<I", 1 << 30) + b[36:], InvalidProgram),  # root offset outside
    ],
    ids=[
        "truncated",
        "magic",
        "header-length",
        "flatbuffer-size",
        "constant-size",
        "identifier",
        "root-offset",
    ],
)
def test_damaged_blob_is_refused(mlp, damage, error):
    with pytest.raises(error):
        split_blob(damage(_blob(mlp.pte)))


@needs_adapter
def test_random_damage_raises_only_pte_errors(mlp):
    """Whatever bytes of the graph are flipped, init either succeeds or raises a PteError."""
    blob = bytearray(_blob(mlp.pte))
    program = ProgramFile(mlp.pte)
    context = BackendInitContext(method_name="forward", named_data=program.named_data)
    fb_offset, fb_size = struct.unpack_from("<II", blob, 10)
    backend = WebGPUBackend()
    rng = random.Random(7)
    outcomes = {"ok": 0, "refused": 0}
    for _ in range(150):
        damaged = bytearray(blob)
        for _ in range(rng.randint(1, 4)):
            damaged[rng.randrange(fb_offset, fb_offset + fb_size)] = rng.randrange(256)
        try:
            handle = backend.init(context, memoryview(bytes(damaged)), ())
        except PteError:
            outcomes["refused"] += 1
        else:
            backend.destroy(handle)
            outcomes["ok"] += 1
    assert outcomes["refused"] > 0


def test_registered_lazily_under_the_exporters_id():
    registry = default_backend_registry()
    assert NAME == "VulkanBackend" and NAME in registry.names
    # Importing pterun, or its backends, does not import wgpu; only using the backend does.
    code = (
        "import sys, pterun, pterun.backends.webgpu; r = pterun.Runtime.get();"
        "assert 'VulkanBackend' in r.backend_registry.registered_backend_names;"
        "assert 'wgpu' not in sys.modules, 'wgpu imported early'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_unavailable_backend_is_not_found_at_load(mlp, monkeypatch):
    monkeypatch.setattr(device, "_probe", "no WebGPU adapter: none in this test")
    assert not pterun.Runtime.get().backend_registry.is_available(NAME)
    program = pterun.Runtime.get().load_program(mlp.pte)
    with pytest.raises(NotFound, match="not available"):
        program.load_method("forward")


@needs_adapter
def test_unsupported_operator_fails_load(mlp):
    data = mlp.pte.read_bytes()
    assert data.count(b"aten.sigmoid.default") == 1
    data = data.replace(b"aten.sigmoid.default", b"aten.sigmoXd.default")
    program = pterun.Runtime.get().load_program(data)
    with pytest.raises(DelegateInvalidCompatibility) as info:
        program.load_method("forward")
    assert info.value.code == ErrorCode.DelegateInvalidCompatibility == 0x30
    assert "unsupported op: aten.sigmoXd.default" in str(info.value)


@needs_adapter
def test_one_device_per_process(mlp):
    a = pterun.Runtime.get().load_program(mlp.pte).load_method("forward")
    b = pterun.Runtime.get().load_program(mlp.pte).load_method("forward")
    (ha,), (hb,) = a.delegate_handles, b.delegate_handles
    assert ha.program.gpu is hb.program.gpu is device.gpu()
