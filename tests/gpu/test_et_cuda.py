"""Programs exported by ExecuTorch's own CUDA backend (CudaPartitioner + CudaBackend), run by pterun.

scripts/export-et-cuda.py exports them on the GPU machine (AOTInductor compiles for the GPU it runs on) into
fixtures/gpu/et_cuda, with eager PyTorch's outputs on the same GPU; this file runs each on the Method path
and through pybindings, as one CUDA graph, several at once, and with outputs kept in device memory. Eager
PyTorch runs its own kernels (cuBLAS, cuDNN with TF32 convolutions, as its defaults are) and AOTInductor
its Triton kernels, so results agree to float32's or bfloat16's rounding, not bit for bit.

With PTERUN_GPU_REPORT=path, each comparison's largest error is appended there (one JSON object a line).
"""

from __future__ import annotations

import gc
import json
import os
import time

import pytest
import torch

import pterun
from pterun import pybindings
from pterun.errors import ErrorCode, InvalidArgument, NativeCodeNotTrusted
from tests.gpu.conftest import FIXTURES, on
from tests.gpu.memory import CU_MEMORYTYPE_DEVICE, driver_memory_type

pytestmark = pytest.mark.gpu
ET_CUDA = FIXTURES / "et_cuda"
# Largest difference from eager, over eager's largest magnitude (at least 1).
TOLERANCE = {"float32": 2e-3, "bfloat16": 4e-2}


def _dirs() -> list:
    return sorted(p for p in ET_CUDA.iterdir() if (p / "info.json").exists()) if ET_CUDA.exists() else []


def _params(select=lambda info: True):
    found = [pytest.param(d, id=d.name) for d in _dirs() if select(_info(d))]
    return found or [pytest.param(None, id="no-et_cuda-fixtures")]


def _info(directory) -> dict:
    return json.loads((directory / "info.json").read_text())


def _fixture(directory):
    if directory is None:
        pytest.skip("no ExecuTorch CUDA programs: run scripts/export-et-cuda.py on this machine")
    info = _info(directory)
    calls = torch.load(directory / "calls.pt", weights_only=False)
    eager = torch.load(directory / "eager.pt", weights_only=False)
    return directory / "program.pte", sorted(directory.glob("*.ptd")), calls, eager, info


def _load(pte, ptd, **options):
    return pterun.Runtime.get().load_program(pte, data_path=ptd or None, trust_native_code=True, **options)


def _error(actual, expected) -> float:
    a, e = actual.detach().cpu().double(), expected.detach().cpu().double()
    return (a - e).abs().max().item() / max(1.0, e.abs().max().item())


def _report(**entry) -> None:
    path = os.environ.get("PTERUN_GPU_REPORT")
    if path:
        with open(path, "a") as out:
            out.write(json.dumps(entry) + "\n")


def _check(name: str, way: str, outputs, expected, info) -> None:
    assert len(outputs) == len(expected if isinstance(expected, list) else [expected])
    expected = expected if isinstance(expected, list) else [expected]
    worst = max(_error(o, e) for o, e in zip(outputs, expected))
    _report(program=name, way=way, max_error=worst)
    assert worst <= TOLERANCE[info["dtype"]], f"{name} ({way}): {worst:.3g} from eager"


def _inputs(call, info):
    return on("cuda", call) if info.get("resident") else list(call)


def test_premise_every_program_has_a_cuda_backend_delegate():
    dirs = _dirs()
    if not dirs:
        pytest.skip("no ExecuTorch CUDA programs: run scripts/export-et-cuda.py on this machine")
    for directory in dirs:
        plan = pterun.format.ProgramFile(directory / "program.pte").plan("forward")
        assert "CudaBackend" in [d.backend_id for d in plan.delegates], directory.name


@pytest.mark.parametrize("directory", _params())
def test_method_path_matches_eager(directory):
    pte, ptd, calls, eager, info = _fixture(directory)
    method = _load(pte, ptd).load_method("forward")
    for call, expected in zip(calls, eager):
        outputs = method.execute(_inputs(call, info))
        assert all(o.is_cuda == bool(info.get("resident")) for o in outputs), "outputs where the program keeps them"
        _check(info["name"], "method", outputs, expected, info)


@pytest.mark.parametrize("directory", _params())
def test_pybindings_module_matches_eager(directory):
    pte, ptd, calls, eager, info = _fixture(directory)
    module = pybindings._load_for_executorch(str(pte), str(ptd[0]) if ptd else None, trust_native_code=True)
    for call, expected in zip(calls, eager):
        _check(info["name"], "pybindings", module.forward(_inputs(call, info)), expected, info)


@pytest.mark.parametrize("directory", _params(lambda info: not info.get("stateful")))
def test_whole_method_is_one_cuda_graph_on_the_device(directory):
    """device="cuda" puts the host arenas on the GPU too, so the copies, the delegate and the rest replay as
    one graph; a method of fixed shapes replays from its third call."""
    pte, ptd, calls, eager, info = _fixture(directory)
    graphed = _load(pte, ptd, device="cuda").load_method("forward")
    plain = _load(pte, ptd, device="cuda", cuda_graphs=False).load_method("forward")
    for _ in range(3):
        for call, expected in zip(calls, eager):
            _check(info["name"], "cuda graph", graphed.execute(on("cuda", call)), expected, info)
    assert graphed.cuda_graph is not None and graphed.cuda_graph.failure is None, graphed.cuda_graph.failure
    if len({tuple(c[0].shape) for c in calls}) == 1:
        assert graphed.cuda_graph.replaying
    # What the graph saves, per call (reported, not asserted).
    args = on("cuda", calls[0])
    timings = {}
    for way, method in (("graph", graphed), ("kernels", plain)):
        for _ in range(5):
            method.execute(args, clone_outputs=False)
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(50):
            method.execute(args, clone_outputs=False)
        torch.cuda.synchronize()
        timings[way] = (time.perf_counter() - start) / 50 * 1e6
    _report(program=info["name"], way="timing", graph_us=timings["graph"], kernels_us=timings["kernels"])


@pytest.mark.parametrize("directory", _params(lambda info: bool(info.get("resident"))))
def test_resident_outputs_are_device_memory_on_both_paths(directory):
    pte, ptd, calls, eager, info = _fixture(directory)
    plan = pterun.format.ProgramFile(pte).plan("forward")
    for index in plan.outputs:
        assert plan.values[index].memory_id is None and plan.values[index].device_type == 1, "premise"
    method = _load(pte, ptd).load_method("forward")
    module = pybindings._load_for_executorch(str(pte), str(ptd[0]) if ptd else None, trust_native_code=True)
    for call, expected in zip(calls, eager):
        for way, outputs in (("method", method.execute(on("cuda", call), clone_outputs=False)),
                             ("pybindings", module.forward(on("cuda", call), clone_outputs=False))):
            for out in outputs:
                assert out.is_cuda and driver_memory_type(out.data_ptr()) == (0, CU_MEMORYTYPE_DEVICE), way
            _check(info["name"], f"resident {way}", outputs, expected, info)
    with pytest.raises(InvalidArgument) as caught:
        method.execute(calls[0])
    assert caught.value.code == ErrorCode.InvalidArgument and "input 0" in str(caught.value)
    _check(info["name"], "resident copied", method.execute(calls[0], copy_inputs=True), eager[0], info)


def test_several_programs_in_one_process_and_released_with_them():
    dirs = [d for d in _dirs() if not _info(d).get("llm")]
    if len(dirs) < 2:
        pytest.skip("no ExecuTorch CUDA programs: run scripts/export-et-cuda.py on this machine")
    loaded = {}
    for directory in dirs:
        pte, ptd, calls, eager, info = _fixture(directory)
        loaded[directory.name] = (_load(pte, ptd).load_method("forward"), calls, eager, info)
    for name, (method, calls, eager, info) in loaded.items():
        _check(name, "together", method.execute(_inputs(calls[0], info)), eager[0], info)
    dropped = sorted(loaded)[::2]
    for name in dropped:
        del loaded[name]
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.full((64 << 20,), 7, dtype=torch.uint8, device="cuda")  # reuse freed memory: stale pointers show up
    for name, (method, calls, eager, info) in loaded.items():
        _check(name, "after others released", method.execute(_inputs(calls[-1], info)), eager[-1], info)
    for name in dropped:
        pte, ptd, calls, eager, info = _fixture(ET_CUDA / name)
        _check(name, "loaded again", _load(pte, ptd).load_method("forward").execute(_inputs(calls[0], info)),
               eager[0], info)


def test_native_code_is_refused_without_trust_on_the_gpu_too():
    dirs = _dirs()
    if not dirs:
        pytest.skip("no ExecuTorch CUDA programs: run scripts/export-et-cuda.py on this machine")
    pte, ptd, *_ = _fixture(dirs[0])
    program = pterun.Runtime.get().load_program(pte, data_path=ptd or None)
    before = torch.cuda.memory_allocated()
    with pytest.raises(NativeCodeNotTrusted) as caught:
        program.load_method("forward")
    assert caught.value.code == ErrorCode.NotSupported and "trust_native_code" in str(caught.value)
    assert torch.cuda.memory_allocated() == before, "refused before any device memory was taken"


@pytest.mark.parametrize("directory", _params(lambda info: bool(info.get("llm"))))
def test_text_llm_runner_generates_eagers_greedy_tokens(directory):
    from pterun.llm import GenerationConfig, TextLLMRunner

    pte, ptd, calls, eager, info = _fixture(directory)
    runner = TextLLMRunner(str(pte), str(directory / "tokenizer.json"), str(ptd[0]) if ptd else None, device="cuda",
                           trust_native_code=True)
    pieces: list[str] = []
    runner.generate(info["prompt"], GenerationConfig(max_new_tokens=len(info["greedy"]), temperature=0.0,
                                                     echo=False, num_bos=1), token_callback=pieces.append)
    greedy = info["greedy"]
    if 2 in greedy:  # the runner stops at EOS
        greedy = greedy[: greedy.index(2)]
    expected = runner.tokenizer.decode(greedy)
    _report(program=info["name"], way="TextLLMRunner", generated="".join(pieces), expected=expected)
    assert "".join(pieces) == expected
