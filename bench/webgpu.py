"""WebGPU benchmarks: a program on pterun's WebGPU backend against the same model on pterun's CUDA path, where a
call's time goes, and a 4-bit ~1B-shaped decoder's tokens per second against the floor of its weights' bytes.

    python bench/webgpu.py export [--out .cache/bench/webgpu] [--decoder-layers 16]   # where ExecuTorch is installed
    python bench/webgpu.py run --programs DIR [--json out.json]                        # on the GPU machine

``export`` writes, compressed for transport (OUT/*.pte.xz): each model of MODELS lowered with ExecuTorch's
WebGPUPartitioner (``<name>.webgpu``) and exported portable (``<name>.portable``, what pterun's CUDA path runs),
their inputs, and ``decoder.webgpu``: Llama 3.2 1B's shape (dim 2048, 16 layers, 32 query and 8 key/value
heads, SwiGLU 8192) with a 32000-token vocabulary, exported by ExecuTorch's Vulkan/WebGPU LLM recipe
(``export_llama --vulkan -qmode 8da4w -G 64 -kv --use_sdpa_with_kv_cache``) from weights on a periodic
codebook (so the program compresses; timings do not depend on weight values).

``run`` times, interleaved in one process after warm-up (medians): each model on WebGPU and on CUDA (CUDA
graphs), each WebGPU call split into writing its inputs (resizing included), encoding and submitting its
pass, and waiting for it and reading the outputs back, with the pass's GPU time from timestamp queries; and the
decoder prefilling a prompt and decoding greedily, its decode tokens/s beside the floor: the bytes its
linear layers' weights take (read once per token) over the device's copy bandwidth, measured there.
"""

from __future__ import annotations

import argparse
import json
import lzma
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import copy_bandwidth  # noqa: E402
from models import SET  # noqa: E402

import pterun  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MODELS = ("tiny_mlp", "llama")
DECODER = dict(dim=2048, n_layers=16, n_heads=32, n_kv_heads=8, vocab_size=32000, hidden_dim=8192,
               norm_eps=1e-5, rope_theta=500000.0)
DECODER_CONTEXT, DECODER_SEQ = 512, 128
PROMPT, NEW_TOKENS = 32, 64


# -- export (needs ExecuTorch) --------------------------------------------------------------------------


def _write(data: bytes, path: Path) -> None:
    path.write_bytes(lzma.compress(data, preset=1))
    print(f"{path.name}: {len(data) / 2**20:.1f} MiB, {path.stat().st_size / 2**20:.1f} MiB compressed", flush=True)


def export_models(out: Path, names) -> None:
    from executorch.backends.webgpu.partitioner.partitioner import WebGPUPartitioner
    from executorch.exir import to_edge_transform_and_lower

    for name in names:
        module, inputs = SET[name]()
        for suffix, partitioners in (("webgpu", [WebGPUPartitioner()]), ("portable", None)):
            with torch.no_grad():  # exported anew for each: lowering consumes the exported program's constants
                exported = torch.export.export(module, inputs)
            program = to_edge_transform_and_lower(exported, partitioner=partitioners).to_executorch()
            _write(program.buffer, out / f"{name}.{suffix}.pte.xz")
        torch.save(list(inputs), out / f"{name}.inputs.pt")


def _periodic(state: dict) -> dict:
    """Every weight on a 16-value codebook, periodic along its rows (scaled like the model's own)."""
    levels = torch.linspace(-1.0, 1.0, 16)
    for key, tensor in state.items():
        if tensor.is_floating_point() and tensor.ndim == 2:
            rows, cols = tensor.shape
            pattern = levels[(torch.arange(rows)[:, None] * 5 + torch.arange(cols)[None, :] * 3) % 16]
            state[key] = pattern * tensor.std().clamp_min(1e-3) * 1.7
    return state


def export_decoder(out: Path, layers: int) -> None:
    from executorch.examples.models.llama.export_llama_lib import export_llama
    from executorch.examples.models.llama.llama_transformer import construct_transformer
    from executorch.examples.models.llama.model_args import ModelArgs
    from executorch.extension.llm.export.config.llm_config import LlmConfig

    params = {**DECODER, "n_layers": layers}
    with tempfile.TemporaryDirectory() as scratch:
        directory = Path(scratch)
        torch.manual_seed(0)
        model = construct_transformer(ModelArgs(max_seq_len=DECODER_SEQ, max_context_len=DECODER_CONTEXT, **params))
        torch.save(_periodic(model.state_dict()), directory / "checkpoint.pth")
        del model
        (directory / "params.json").write_text(json.dumps(params))
        config = LlmConfig()
        config.base.params, config.base.checkpoint = str(directory / "params.json"), str(directory / "checkpoint.pth")
        config.base.metadata = json.dumps({"get_bos_id": 1, "get_eos_ids": [2]})
        config.model.use_kv_cache = config.model.use_sdpa_with_kv_cache = config.model.enable_dynamic_shape = True
        config.export.max_seq_length, config.export.max_context_length = DECODER_SEQ, DECODER_CONTEXT
        config.export.output_dir, config.export.output_name = scratch, str(directory / "decoder.pte")
        config.backend.vulkan.enabled = True
        config.quantization.qmode, config.quantization.group_size = "8da4w", 64
        written = Path(export_llama(config))
        _write(written.read_bytes(), out / "decoder.webgpu.pte.xz")


# -- run (the GPU machine) ------------------------------------------------------------------------------


def _load(path: Path, **options):
    return pterun.Runtime.get().load_program(lzma.decompress(path.read_bytes()), **options).load_method("forward")


def _interleaved(ways: dict, rounds: int = 30, warmup: int = 5) -> dict[str, float]:
    """Median milliseconds of each way, the ways called in turn each round."""
    times: dict[str, list[float]] = {name: [] for name in ways}
    for k in range(warmup + rounds):
        for name, fn in ways.items():
            start = time.perf_counter()
            fn()
            if k >= warmup:
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) * 1e3 for name, t in times.items()}


def _delegate(method):
    from pterun.backends.webgpu import WebGPUDelegate

    found = [h for h in method.delegate_handles if isinstance(h, WebGPUDelegate)]
    assert found, "no VulkanBackend delegate"
    return found


def breakdown(method, inputs: list, rounds: int = 30) -> dict:
    """Median milliseconds of each phase of the method's (first) delegate's call, on the arguments the method
    passes it for ``inputs``, and the GPU time of its pass (timestamp queries, where the device has them)."""
    from pterun.backends.webgpu.program import record

    handle = _delegate(method)[0]
    program = handle.program
    passed: list = []
    execute = program.execute
    program.execute = lambda args: (passed.append(list(args)), execute(args))[1]
    try:
        method.execute(inputs)
    finally:
        del program.execute
    graph_inputs = passed[0][: len(program.inputs)]
    gpu = program.gpu
    stamps = gpu.device.create_query_set(type="timestamp", count=2) if gpu.timestamps else None
    resolved = gpu.buffer(16, gpu.QUERY_RESOLVE) if stamps else None
    host = gpu.buffer(16, gpu.READBACK) if stamps else None
    phases: dict[str, list] = {"write_inputs": [], "encode_submit": [], "wait_readback": [], "gpu": []}
    for k in range(rounds + 5):
        args = [*graph_inputs, *passed[0][len(program.inputs):]]
        a = time.perf_counter()
        conversions = program.write_inputs(args)
        b = time.perf_counter()
        encoder = gpu.device.create_command_encoder()
        if stamps:
            writes = {"query_set": stamps, "beginning_of_pass_write_index": 0, "end_of_pass_write_index": 1}
            cpass = encoder.begin_compute_pass(timestamp_writes=writes)
        else:
            cpass = encoder.begin_compute_pass()
        record(cpass, conversions)
        record(cpass, program.dispatches)
        cpass.end()
        program.record_outputs(encoder)
        if stamps:
            encoder.resolve_query_set(stamps, 0, 2, resolved, 0)
            encoder.copy_buffer_to_buffer(resolved, 0, host, 0, 16)
        gpu.queue.submit([encoder.finish()])
        c = time.perf_counter()
        program.read_outputs(args)
        d = time.perf_counter()
        if k < 5:
            continue
        phases["write_inputs"].append(b - a)
        phases["encode_submit"].append(c - b)
        phases["wait_readback"].append(d - c)
        if stamps:
            host.map_sync(gpu.wgpu.MapMode.READ)
            t0, t1 = memoryview(host.read_mapped()).cast("Q")[:2]
            host.unmap()
            phases["gpu"].append((t1 - t0) * gpu.timestamp_period * 1e-9)
    result = {k: statistics.median(v) * 1e3 for k, v in phases.items() if v}
    result["dispatches"] = handle.dispatch_count
    return result


def run_model(programs: Path, name: str, cuda: bool) -> dict:
    inputs = torch.load(programs / f"{name}.inputs.pt")
    webgpu = _load(programs / f"{name}.webgpu.pte.xz")
    ways = {"webgpu_ms": lambda: webgpu.execute(inputs)}
    row: dict = {}
    if cuda:
        on_gpu = _load(programs / f"{name}.portable.pte.xz", device="cuda")
        cuda_inputs = [x.cuda() for x in inputs]
        a, b = webgpu.execute(inputs), on_gpu.execute(cuda_inputs)
        row["max_abs_diff"] = max((x.float() - y.float().cpu()).abs().max().item() for x, y in zip(a, b))

        def on_cuda():
            on_gpu.execute(cuda_inputs)
            torch.cuda.synchronize()

        ways["cuda_ms"] = on_cuda
    row.update(_interleaved(ways))
    if cuda:
        row["webgpu_over_cuda"] = row["webgpu_ms"] / row["cuda_ms"]
    row["breakdown"] = breakdown(webgpu, inputs)
    print(name, json.dumps(row), flush=True)
    return row


def weight_bytes(method) -> int:
    """Bytes of the decoder's linear layers' weights and scales as the GPU holds them (packed constants)."""
    total = 0
    for handle in _delegate(method):
        seen = set()
        for slot in handle.program.slots.packed:
            if id(slot.storage) not in seen:
                seen.add(id(slot.storage))
                total += slot.storage.nbytes
    return total


def run_decoder(path: Path, prompt_len: int = PROMPT, new_tokens: int = NEW_TOKENS) -> dict:
    started = time.perf_counter()
    program = pterun.Runtime.get().load_program(lzma.decompress(path.read_bytes()))
    method = program.load_method("forward")
    load_s = time.perf_counter() - started
    prompt_len = min(prompt_len, method.method_meta().input_tensor_meta(0).sizes()[-1])  # the longest it takes
    context = int(program.load_method("get_max_context_len").execute([])[0])
    new_tokens = min(new_tokens, context - prompt_len - 1)
    prompt = torch.randint(3, 500, (1, prompt_len), generator=torch.Generator().manual_seed(0))
    for _ in range(2):  # warm-up: every shape's first call
        method.execute([prompt, torch.tensor([0])])
        method.execute([prompt[:, :1], torch.tensor([prompt_len])])
    start = time.perf_counter()
    logits = method.execute([prompt, torch.tensor([0])])[0]
    prefill_s = time.perf_counter() - start
    token = int(logits.reshape(-1, logits.shape[-1])[-1].argmax())
    steps = []
    for pos in range(prompt_len, prompt_len + new_tokens):
        start = time.perf_counter()
        logits = method.execute([torch.tensor([[token]]), torch.tensor([pos])])[0]
        token = int(logits.reshape(-1, logits.shape[-1])[-1].argmax())
        steps.append(time.perf_counter() - start)
    decode = statistics.median(steps)
    weights = weight_bytes(method)
    bandwidth = copy_bandwidth() if torch.cuda.is_available() else float("nan")
    floor = weights / bandwidth  # each weight byte read once a token, at the copy's bytes moved per second
    row = {"load_s": load_s, "prefill_tokens_per_s": prompt_len / prefill_s, "decode_ms": decode * 1e3,
           "decode_tokens_per_s": 1 / decode, "weight_bytes": weights, "copy_bandwidth_GBps": bandwidth / 1e9,
           "floor_ms": floor * 1e3, "floor_tokens_per_s": 1 / floor,
           "breakdown": breakdown(method, [torch.tensor([[token]]), torch.tensor([prompt_len + new_tokens])])}
    print("decoder", json.dumps(row), flush=True)
    return row


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    ex = sub.add_parser("export")
    ex.add_argument("--out", type=Path, default=ROOT / ".cache" / "bench" / "webgpu")
    ex.add_argument("--decoder-layers", type=int, default=DECODER["n_layers"])
    ex.add_argument("--only", choices=("models", "decoder"), default=None)
    ex.add_argument("--models", default=",".join(MODELS))
    rn = sub.add_parser("run")
    rn.add_argument("--programs", type=Path, default=ROOT / ".cache" / "bench" / "webgpu")
    rn.add_argument("--json", type=Path, default=None)
    rn.add_argument("--only", choices=("models", "decoder"), default=None)
    rn.add_argument("--models", default=",".join(MODELS))
    args = parser.parse_args()
    if args.command == "export":
        args.out.mkdir(parents=True, exist_ok=True)
        if args.only in (None, "models"):
            export_models(args.out, args.models.split(","))
        if args.only in (None, "decoder"):
            export_decoder(args.out, args.decoder_layers)
        return
    from pterun.backends.webgpu import device

    adapter = getattr(device.gpu().device, "adapter", None)
    cuda = torch.cuda.is_available()
    info = {"adapter": dict(adapter.info) if adapter is not None else {}, "torch": torch.__version__,
            "cuda": torch.cuda.get_device_name() if cuda else None}
    print("environment", json.dumps(info, default=str), flush=True)
    results: dict = {"environment": info}
    if args.only in (None, "models"):
        results["models"] = {name: run_model(args.programs, name, cuda) for name in args.models.split(",")}
    if args.only in (None, "decoder"):
        results["decoder"] = run_decoder(args.programs / "decoder.webgpu.pte.xz")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
