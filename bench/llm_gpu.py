"""LLM decode on a GPU: pterun.llm against Hugging Face transformers' generate (static cache, torch.compile).

    python bench/llm_gpu.py export [--size 100m|1b] [--quant 8da4w] [--out .cache/bench/llm]  # with ExecuTorch
    python bench/llm_gpu.py run --dir DIR [--sizes 100m,1b] [--json OUT]     # on the GPU machine
    python bench/llm_gpu.py profile --dir DIR [--sizes 100m] [--steps 64] [--rounds 3]  # where a step goes
    python bench/llm_gpu.py startup --dir DIR [--sizes 100m]                 # compile=True, cold and again

``export --size tiny`` writes the same program at a size of a few thousand weights (2 layers, width 64, a
512-token vocabulary): the test suite exports it so that the export step cannot break unseen
(tests/test_gpu_tools.py).

The models are Llama-architecture decoders in bfloat16: "100m" has bench/llm_export.py's shape (dim 768, 12
layers, 12 heads sharing 4 KV heads, hidden 2048, vocab 16384), "1b" Llama-3.2-1B's layers (dim 2048, 16
layers, 32 heads sharing 8, hidden 8192) with a 32000-token vocabulary (1.1B parameters). Each matrix's
weights are two values of either sign, in a short repeated pattern (so the file compresses to travel; speed
does not depend on the values); exported from transformers' LlamaForCausalLM with its static cache
(``TorchExportableModuleWithStaticCache``), the program optimum-executorch writes, with the metadata methods
the runner reads. Its positions are tensors, so pterun replays each decode step as one CUDA graph.
``--quant 8da4w`` writes the same model in float32 with its linear layers quantized as optimum-executorch
quantizes them (8-bit dynamic activations, 4-bit weights in groups of 32) and lowered to XNNPACK.

``run`` times, for each size whose file is there, prompt 128 and 128 new tokens (greedy, EOS never chosen):
- pterun.llm's TextLLMRunner on the .pte (device="cuda"), plain and with ``compile=True`` (its load and first
  generation timed as the compile's cost), from the runner's own Stats; and its 8da4w form where that file
  is there, the same ways (``pterun_8da4w``, ``pterun_compile_8da4w``: each against the bf16 program's rate
  the same way);
- transformers' ``generate`` on the same model (the same weights, made the same way) with
  ``cache_implementation="static"``, which transformers compiles (``mode="reduce-overhead"``: CUDA graphs);
- the floor: the weights' bytes over the device-to-device copy bandwidth measured here, per token.
The JSON (``--json``) is written again after each measurement, so a run cut short keeps what it measured.

``startup`` times what ``compile=True`` costs a process: twice, each time a fresh Python process that imports
torch and pterun, loads the program with ``compile=True`` and generates 8 tokens from the 128-token prompt. The first
process starts from empty caches (pterun's load cache and Inductor's, in a temporary directory): the cold
compile. The second finds both as the first left them: the compiled code read back from the load cache. Both
start with Python's bytecode of torch and pterun cached, as on a machine where pip compiled it at install: a
process with caches of its own runs the same script first (``bytecode``), writing bytecode where Python is allowed
to (``PYTHONPYCACHEPREFIX`` in the temporary directory where torch's own directory is read-only).
"""

from __future__ import annotations

import argparse
import json
import lzma
import shutil
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import copy_bandwidth  # noqa: E402
from llm import prompt_of  # noqa: E402
from llm_export import CONTEXT, PARAMS, SIZES, write_tokenizer  # noqa: E402  (puts the repository on the path)
from models import codebook  # noqa: E402

from tests.support.llm_programs import quantize_8da4w_linears  # noqa: E402
from tests.support.llm_tokenizers import BOS_ID, EOS_ID  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SIGN_PERIOD = 257
# Generations before the timed rounds, the same for every way: each compiles or captures its graphs in its first
# ones (pterun captures a prompt's length at its second generation and replays it from the third).
WARMUPS = 2  # a prime: a matrix's rows do not repeat each other's signs


def program_name(size: str, quant: str | None = None) -> str:
    return f"hf_llama{size}.{quant or 'bf16'}.pte"


def tokenizer_name(size: str) -> str:
    return f"tokenizer.{size}.json"


def hf_model(params: dict = PARAMS):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=params["vocab_size"], hidden_size=params["dim"], intermediate_size=params["hidden_dim"],
        num_hidden_layers=params["n_layers"], num_attention_heads=params["n_heads"],
        num_key_value_heads=params["n_kv_heads"], max_position_embeddings=CONTEXT, rms_norm_eps=params["norm_eps"],
        bos_token_id=BOS_ID, eos_token_id=EOS_ID, pad_token_id=0, tie_word_embeddings=False,
    )
    model = codebook(LlamaForCausalLM(config)).eval().requires_grad_(False)
    with torch.no_grad():
        # Two values per matrix (its mean magnitude, either sign), the signs a random run of 257 repeated: the
        # file must travel compressed to the GPU machine (the 1B program's 2.5 GB xz to a few MB, where random
        # signs left 1 bit a weight), and decode speed does not depend on the values.
        signs = torch.where(torch.rand(SIGN_PERIOD, generator=torch.Generator().manual_seed(0)) < 0.5, -1.0, 1.0)
        for p in model.parameters():
            if p.dim() >= 2:
                p.copy_(signs.repeat(p.numel() // SIGN_PERIOD + 1)[:p.numel()].view_as(p) * p.abs().mean())
        model.lm_head.weight[EOS_ID].zero_()  # greedy decoding never picks EOS: every run makes the tokens asked
    return model.to(torch.bfloat16)


def export(out: Path, size: str = "100m", compress: bool = True, quant: str | None = None) -> Path:
    from executorch.exir import to_edge_transform_and_lower
    from transformers import GenerationConfig
    from transformers.integrations.executorch import TorchExportableModuleWithStaticCache

    class Decoder(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.inner = TorchExportableModuleWithStaticCache(model, batch_size=1, max_cache_len=CONTEXT)

        def forward(self, input_ids, cache_position):
            return self.inner(input_ids=input_ids, cache_position=cache_position)

    params = SIZES[size]
    model = hf_model(params)
    partitioner = []
    if quant == "8da4w":
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        model = model.float()
        quantize_8da4w_linears(model)
        partitioner = [XnnpackPartitioner()]
    model.generation_config = GenerationConfig(use_cache=True, cache_implementation="static",
                                               cache_config={"batch_size": 1, "max_cache_len": CONTEXT})
    seq = torch.export.Dim("seq_length", min=1, max=CONTEXT - 1)
    tokens = torch.tensor([[BOS_ID, 5, 6]])
    exported = torch.export.export(Decoder(model).eval(), (tokens, torch.arange(3)),
                                   dynamic_shapes=({1: seq}, {0: seq}), strict=True)
    metadata = {"get_max_seq_len": CONTEXT, "get_max_context_len": CONTEXT, "get_vocab_size": params["vocab_size"],
                "get_bos_id": BOS_ID, "get_eos_ids": [EOS_ID], "use_kv_cache": True,
                "use_sdpa_with_kv_cache": False, "enable_dynamic_shape": True}
    program = to_edge_transform_and_lower(exported, partitioner=partitioner, constant_methods=metadata).to_executorch()
    out.mkdir(parents=True, exist_ok=True)
    del model, exported
    if compress:
        written = out / (program_name(size, quant) + ".xz")
        with lzma.open(written, "wb", preset=6) as f:
            f.write(program.buffer)
    else:
        written = out / program_name(size, quant)
        with open(written, "wb") as f:
            program.write_to_file(f)
    write_tokenizer(out / tokenizer_name(size), params["vocab_size"])
    return written


def _pterun(pte: Path, tokenizer: Path, prompt: str, new_tokens: int, rounds: int, **options) -> dict:
    """pterun.llm's decode rate and first-token time (medians), and the load plus first generation's time."""
    from pterun.llm import GenerationConfig, TextLLMRunner

    config = GenerationConfig(temperature=0.0, echo=False, max_new_tokens=new_tokens)
    one = GenerationConfig(temperature=0.0, echo=False, max_new_tokens=1)
    torch.cuda.synchronize()
    start = time.perf_counter()
    runner = TextLLMRunner(str(pte), str(tokenizer), device="cuda", **options)
    rates, firsts = [], []
    for n in range(WARMUPS + rounds):
        runner.reset()
        stats = []
        runner.generate(prompt, config, stats_callback=stats.append)
        s = stats[-1]
        if n == 0:
            ready = time.perf_counter() - start
            counts = (s.num_prompt_tokens, s.num_generated_tokens)
        # The first token as transformers' is timed: the wall time of a whole generation of one token.
        runner.reset()
        torch.cuda.synchronize()
        first = time.perf_counter()
        runner.generate(prompt, one)
        torch.cuda.synchronize()
        first = time.perf_counter() - first
        if n < WARMUPS:
            continue
        rates.append(s.num_generated_tokens * 1000 / max(1, s.inference_end_ms - s.prompt_eval_end_ms))
        firsts.append(round(first * 1000, 2))
    graph = runner.decoder.method.cuda_graph
    status = getattr(runner.decoder.method, "compile_status", None)
    print(f"pterun {options or 'plain'}: prompt {counts[0]} tokens, generated {counts[1]}; decode graph replaying "
          f"{graph is not None and graph.replaying}" + (f"; compile: {status}" if status else ""), flush=True)
    # Per round too: after the warm-ups a round's prompt replays its graph, unless its capture came later.
    return {"decode_tok_s": statistics.median(rates), "ttft_ms": statistics.median(firsts),
            "ttft_rounds_ms": firsts, "load_and_first_generation_s": ready}


def _transformers(params: dict, tokenizer: Path, prompt: str, new_tokens: int, rounds: int) -> tuple[dict, int]:
    """transformers' generate with a static cache, compiled (reduce-overhead); and the weights' bytes."""
    from tokenizers import Tokenizer
    from transformers import CompileConfig

    model = hf_model(params).to("cuda")
    # transformers compiles the forward itself for a static cache (CUDA graphs, its own step marking).
    model.generation_config.cache_implementation = "static"
    model.generation_config.compile_config = CompileConfig(fullgraph=True, mode="reduce-overhead")
    ids = torch.tensor([Tokenizer.from_file(str(tokenizer)).encode(prompt, add_special_tokens=False).ids],
                       device="cuda")
    measured = []
    for _ in range(WARMUPS + rounds):
        torch.cuda.synchronize()
        start = time.perf_counter()
        model.generate(ids, max_new_tokens=1, do_sample=False)
        torch.cuda.synchronize()
        ttft = time.perf_counter() - start
        start = time.perf_counter()
        out = model.generate(ids, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False)
        torch.cuda.synchronize()
        whole = time.perf_counter() - start
        measured.append(((out.shape[1] - ids.shape[1] - 1) / max(whole - ttft, 1e-9), ttft * 1000))
    measured = measured[WARMUPS:]
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    del model
    torch.cuda.empty_cache()
    return ({"decode_tok_s": statistics.median(r[0] for r in measured),
             "ttft_ms": statistics.median(r[1] for r in measured)}, weights)


WAYS = {"pterun": {}, "pterun_compile": {"compile": True}}


def run(directory: Path, sizes: list[str], new_tokens: int, rounds: int, out: Path | None,
        ways: list[str]) -> None:
    bandwidth = copy_bandwidth()
    table: dict = {"copy_bandwidth_gb_s": bandwidth / 1e9, "new_tokens": new_tokens}

    def record(size: str, key: str, value) -> None:
        table.setdefault(size, {})[key] = value
        print(f"{size} {key}: {json.dumps(value)}", flush=True)
        if out is not None:
            out.write_text(json.dumps(table, indent=1))

    for size in sizes:
        pte, quantized = _program(directory, size), _program(directory, size, "8da4w")
        tokenizer = directory / tokenizer_name(size)
        if pte is None and quantized is None:
            print(f"{size}: no {program_name(size)}(.xz) nor {program_name(size, '8da4w')}(.xz): skipped", flush=True)
            continue
        prompt = prompt_of(tokenizer, 128)
        theirs, weights = _transformers(SIZES[size], tokenizer, prompt, new_tokens, rounds)
        floor = weights / bandwidth
        record(size, "weights_mib", weights / 2**20)
        record(size, "floor_ms_per_token", floor * 1000)
        record(size, "transformers", theirs)
        for way in ways if pte is not None else ():
            ours = _pterun(pte, tokenizer, prompt, new_tokens, rounds, **WAYS[way])
            ours["over_floor"] = (1 / ours["decode_tok_s"]) / floor
            ours["over_transformers"] = ours["decode_tok_s"] / theirs["decode_tok_s"]
            record(size, way, ours)
            torch.cuda.empty_cache()
        for way in ways if quantized is not None else ():
            ours = _pterun(quantized, tokenizer, prompt, new_tokens, rounds, **WAYS[way])
            ours["over_transformers"] = ours["decode_tok_s"] / theirs["decode_tok_s"]
            if way in table[size]:
                ours["over_bf16"] = ours["decode_tok_s"] / table[size][way]["decode_tok_s"]
            record(size, f"{way}_8da4w", ours)
            torch.cuda.empty_cache()


def profile(directory: Path, sizes: list[str], steps: int, ways: list[str], rounds: int, out: Path | None) -> None:
    """Where a decode step's time goes, for each way of running the program: the runner's own step (feed the
    token, run the method, pick the next token greedily) ``steps`` times after a generation, timed whole, then
    under PyTorch's profiler: the GPU's kernels per step (how many, their time) and the kernels that take most.
    The 8da4w program, where its file is there, is profiled the same ways (``<way>_8da4w``).

    Every program of a size is loaded first and the rounds interleave them, each round in another order (the
    step's median over ``rounds``): timed one after the other in one process, the fourth program came out
    14-35% slower whichever it was (docs/benchmarks.md)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as profiler

    from pterun.llm import GenerationConfig, TextLLMRunner

    table: dict = {}
    for size in sizes:
        tokenizer = directory / tokenizer_name(size)
        programs = [(way, _program(directory, size), way) for way in ways]
        # The 8da4w form, where it is there, the same ways: its own step against the bf16 program's.
        programs += [(f"{way}_8da4w", _program(directory, size, "8da4w"), way) for way in ways]
        programs = [(key, pte, way) for key, pte, way in programs if pte is not None]
        if not programs:
            print(f"{size}: no {program_name(size)}(.xz) nor {program_name(size, '8da4w')}(.xz): skipped", flush=True)
            continue
        prompt = prompt_of(tokenizer, 128)
        runners = {}
        for key, pte, way in programs:
            runner = TextLLMRunner(str(pte), str(tokenizer), device="cuda", **WAYS[way])
            runner.generate(prompt, GenerationConfig(temperature=0.0, echo=False, max_new_tokens=32))
            _decode_steps(runner, steps)  # the same positions again: shapes and graphs as measured
            runners[key] = runner
        keys = list(runners)
        walls: dict[str, list[float]] = {key: [] for key in keys}
        for r in range(rounds):
            for key in keys[r % len(keys):] + keys[:r % len(keys)]:
                torch.cuda.synchronize()
                start = time.perf_counter()
                _decode_steps(runners[key], steps)
                torch.cuda.synchronize()
                walls[key].append((time.perf_counter() - start) / steps * 1000)
        for key, runner in runners.items():
            with profiler(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                _decode_steps(runner, steps)
                torch.cuda.synchronize()
            kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
            gpu = sum(e.device_time_total for e in kernels) / steps / 1000
            by_name: dict = {}
            for e in kernels:
                time_, count = by_name.get(e.name, (0.0, 0))
                by_name[e.name] = (time_ + e.device_time_total, count + 1)
            top = sorted(by_name.items(), key=lambda kv: -kv[1][0])[:16]
            row = {"step_ms": statistics.median(walls[key]), "step_ms_rounds": [round(w, 4) for w in walls[key]],
                   "gpu_kernel_ms": gpu, "kernels_per_step": len(kernels) / steps,
                   "top_kernels_us_per_step": {name[:90]: t / steps for name, (t, _) in top},
                   "top_kernels_per_step": {name[:90]: n / steps for name, (_, n) in top}}
            row["compile_status"] = runner.decoder.method.compile_status
            table.setdefault(size, {})[key] = row
            print(f"{size} {key} ({row['compile_status']}): step {row['step_ms']:.3f} ms (rounds "
                  f"{', '.join(f'{w:.3f}' for w in walls[key])}), GPU kernels {gpu:.3f} ms in "
                  f"{row['kernels_per_step']:.0f} kernels per step", flush=True)
            for name, t in row["top_kernels_us_per_step"].items():
                print(f"    {t:8.1f} us in {row['top_kernels_per_step'][name]:5.1f}  {name}", flush=True)
            if out is not None:
                out.write_text(json.dumps(table, indent=1))
        del runners, runner
        torch.cuda.empty_cache()


# A process as a user's: Python, pterun and the runner, timed from its first line (its import of torch included).
START = """
import json, sys, time
start = time.perf_counter()
import torch
from pterun.llm import GenerationConfig, TextLLMRunner
imported = time.perf_counter()
pte, tokenizer, device, cache_dir, prompt = sys.argv[1:6]
runner = TextLLMRunner(pte, tokenizer, device=device, compile=True, cache_dir=cache_dir)
runner.load()
loaded = time.perf_counter()
runner.generate(prompt, GenerationConfig(temperature=0.0, echo=False, max_new_tokens=8))
if device == "cuda":
    torch.cuda.synchronize()
done = time.perf_counter()
print(json.dumps({"import_s": imported - start, "load_s": loaded - imported, "generate_s": done - loaded,
                  "compile_status": runner.decoder.method.compile_status}))
"""


def startup(directory: Path, sizes: list[str], device: str, out: Path | None) -> None:
    """Each size's compile=True start, cold and then again, each in a process of its own (see the module's text);
    with ``out``, the second process's profile beside it (``<out>.<size>.prof``, for pstats)."""
    import os
    import subprocess
    import tempfile

    table: dict = {}
    for size in sizes:
        pte = _program(directory, size)
        if pte is None:
            print(f"{size}: no {program_name(size)}(.xz): skipped", flush=True)
            continue
        tokenizer = directory / tokenizer_name(size)
        with tempfile.TemporaryDirectory() as caches:
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]))
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            if not os.access(Path(torch.__file__).parent, os.W_OK) and "PYTHONPYCACHEPREFIX" not in env:
                env["PYTHONPYCACHEPREFIX"] = os.path.join(caches, "bytecode")
            script = Path(caches) / "start.py"  # a file: cProfile runs one, not -c
            script.write_text(START)
            prompt = prompt_of(tokenizer, 128)
            for run_ in ("bytecode", "cold", "again"):
                # The bytecode's process compiles into caches of its own: the cold process's are empty.
                own = os.path.join(caches, "primer" if run_ == "bytecode" else "shared")
                child_env = dict(env, TORCHINDUCTOR_CACHE_DIR=os.path.join(own, "inductor"),
                                 TRITON_CACHE_DIR=os.path.join(own, "triton"))
                arguments = [str(pte), str(tokenizer), device, os.path.join(own, "pterun"), prompt]
                profiled = ["-m", "cProfile", "-o", f"{out}.{size}.prof"] if out is not None and run_ == "again" else []
                command = [sys.executable, *profiled, str(script), *arguments]
                start = time.perf_counter()
                child = subprocess.run(command, env=child_env, capture_output=True, text=True)
                if child.returncode != 0:
                    raise SystemExit(f"{size} {run_}: the process failed:\n{child.stderr[-3000:]}")
                row = json.loads(child.stdout.strip().splitlines()[-1])
                row["process_s"] = time.perf_counter() - start
                table.setdefault(size, {})[run_] = row
                print(f"{size} {run_}: process {row['process_s']:.1f} s (imports {row['import_s']:.1f} s, load "
                      f"{row['load_s']:.1f} s, 8 tokens {row['generate_s']:.1f} s); {row['compile_status']}",
                      flush=True)
                if out is not None:
                    out.write_text(json.dumps(table, indent=1))


def _decode_steps(runner, count: int) -> None:
    """The runner's per-token work, greedily, from the position its last generation reached."""
    token = 5
    for i in range(count):
        token = int(torch.argmax(runner.decoder.decode_step(token, runner.pos + i)))


def _program(directory: Path, size: str, quant: str | None = None) -> Path | None:
    """The program's file, unpacked from its .xz where only that is there; None where neither is."""
    pte = directory / program_name(size, quant)
    if not pte.exists():
        packed = directory / (program_name(size, quant) + ".xz")
        if not packed.exists():
            return None
        with lzma.open(packed) as src, open(pte, "wb") as dst:
            shutil.copyfileobj(src, dst)
    return pte


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=["export", "run", "profile", "startup"])
    parser.add_argument("--out", type=Path, default=ROOT / ".cache" / "bench" / "llm")
    parser.add_argument("--dir", type=Path, default=ROOT / ".cache" / "bench" / "llm")
    parser.add_argument("--size", choices=sorted(SIZES), default="100m", help="export: which model")
    parser.add_argument("--sizes", default="100m,1b", help="run: the models to time, those whose file is there")
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--steps", type=int, default=64, help="profile: decode steps timed and profiled")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None, help="run: write the figures here")
    parser.add_argument("--quant", choices=["8da4w"], default=None, help="export: the 8da4w form (XNNPACK)")
    parser.add_argument("--no-xz", action="store_true", help="export: the .pte as it is (to run where exported)")
    parser.add_argument("--ways", default=",".join(WAYS), help=f"run: which of pterun's ways ({', '.join(WAYS)})")
    parser.add_argument("--device", default="cuda", help="startup: where the program runs")
    args = parser.parse_args()
    ways = [w for w in args.ways.split(",") if w]
    if set(ways) - set(WAYS):
        parser.error(f"--ways: one of {', '.join(WAYS)}")
    if args.what == "export":
        path = export(args.out, args.size, compress=not args.no_xz, quant=args.quant)
        print(f"wrote {path} ({path.stat().st_size / 2**20:.1f} MiB)")
    elif args.what == "profile":
        profile(args.dir, args.sizes.split(","), args.steps, ways, args.rounds, args.json)
    elif args.what == "startup":
        startup(args.dir, args.sizes.split(","), args.device, args.json)
    else:
        run(args.dir, args.sizes.split(","), args.new_tokens, args.rounds, args.json, ways)


if __name__ == "__main__":
    main()
