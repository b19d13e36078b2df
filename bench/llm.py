"""CPU generation: pterun.llm's TextLLMRunner against ExecuTorch's, on the same LLM programs.

    PYTHONPATH=src python bench/llm.py [--dir .cache/bench/llm] [--threads 1,2] [--rounds 5]

The programs are bench/llm_export.py's (a 100M Llama, portable and XNNPACK 8da4w, and the 1B-shaped one in
8da4w where ``llm_export.py --size 1b`` wrote it). Each
generation feeds a prompt of 128 tokens and makes 128 greedily (the programs' EOS is never
picked, so every run makes them all). Both runners live in this process and run alternately,
round by round, with the same number of threads (torch's intra-op threads and the program's
``num_threads`` for pterun, ExecuTorch's threadpool for ExecuTorch); each is warmed up once
first. Figures are medians over the rounds of each runner's own Stats: time to first token
(first_token_ms - inference_start_ms) and decode tokens/s (generated tokens over
inference_end_ms - prompt_eval_end_ms, as ExecuTorch's report computes it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from contextlib import contextmanager
from pathlib import Path

# Set before torch loads libgomp. ExecuTorch's custom_sdpa splits its heads over ExecuTorch's threadpool, and
# its products call MKL from those threads: each then owns an OpenMP team whose threads stay. libgomp spins
# at its barriers only while it manages no more threads than the machine has CPUs, and past that it sleeps and
# wakes its workers at every region. On 2 cores every 2-thread PyTorch region after ExecuTorch's first
# generation took ~10x longer (pterun's 2-thread decode fell below its 1-thread one). With 1 as the default
# for new threads, ExecuTorch's threads run MKL alone; each runner's threads are still set below
# (torch.set_num_threads sets the main thread's count).
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = {  # label: (program, its tokenizer)
    "portable": ("llama100m.pte", "tokenizer.json"),
    "xnnpack 8da4w": ("llama100m.xnnpack-8da4w.pte", "tokenizer.json"),
    "1b xnnpack 8da4w": ("llama1b.xnnpack-8da4w.pte", "tokenizer.1b.json"),
}
_TEXT = ("The quick brown fox jumps over the lazy dog while the small program counts every token it "
         "reads, and the runner keeps its cache warm for the next word. ")


def prompt_of(tokenizer_path: Path, length: int) -> str:
    """A prompt that the tokenizer encodes as exactly ``length`` tokens (cut at a word boundary)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    words = (_TEXT * (length // 4 + 1)).split(" ")
    for end in range(1, len(words) + 1):
        text = " ".join(words[:end])
        count = len(tokenizer.encode(text, add_special_tokens=False).ids)
        if count == length:
            return text
        if count > length:  # pad the shorter text with single characters, one token each
            text = " ".join(words[:end - 1])
            short = length - len(tokenizer.encode(text, add_special_tokens=False).ids)
            return text + "\n" * short
    raise AssertionError("the text is too short")


@contextmanager
def _quiet_stdout():
    """ExecuTorch's runner prints every piece to C stdout and its log to stderr; send them nowhere."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        for fd, copy in zip((1, 2), saved):
            os.dup2(copy, fd)
            os.close(copy)
        os.close(devnull)


def _figures(stats) -> tuple[float, float, int, int]:
    ttft = stats.first_token_ms - stats.inference_start_ms
    decode_ms = stats.inference_end_ms - stats.prompt_eval_end_ms
    return ttft, stats.num_generated_tokens / decode_ms * 1e3, stats.num_prompt_tokens, stats.num_generated_tokens


def generate(runner, prompt: str, config, quiet: bool, pieces: list | None = None) -> tuple[float, float, int, int]:
    """One generation from position 0; its figures, and the text pieces into ``pieces`` when given."""
    got = []
    runner.reset()
    callback = pieces.append if pieces is not None else None
    if quiet:
        with _quiet_stdout():
            runner.generate(prompt, config, token_callback=callback, stats_callback=got.append)
    else:
        runner.generate(prompt, config, token_callback=callback, stats_callback=got.append)
    return _figures(got[0])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dir", type=Path, default=ROOT / ".cache" / "bench" / "llm")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--prompt", type=int, default=128, help="prompt tokens")
    parser.add_argument("--new", type=int, default=128, help="tokens to generate")
    parser.add_argument("--only", default="", help=f"comma-separated program names ({', '.join(PROGRAMS)})")
    args = parser.parse_args()
    # ExecuTorch's runner finds the LLM export's custom and quantized kernels once these are imported.
    import executorch.extension.llm.custom_ops.custom_ops  # noqa: F401
    import executorch.kernels.quantized  # noqa: F401
    from executorch.extension.llm import runner as et
    from executorch.extension.pybindings import portable_lib

    import pterun.llm

    only = [s for s in args.only.split(",") if s]
    rows = []
    for threads in (int(t) for t in args.threads.split(",")):
        torch.set_num_threads(threads)
        portable_lib._unsafe_reset_threadpool(threads)
        for label, (name, tokenizer_name) in PROGRAMS.items():
            pte, tokenizer = args.dir / name, args.dir / tokenizer_name
            if only and label not in only:
                continue
            if not pte.exists():
                print(f"{label}: no {pte.name} (bench/llm_export.py writes it): skipped", flush=True)
                continue
            prompt = prompt_of(tokenizer, args.prompt)
            ways = {
                "pterun": (pterun.llm.TextLLMRunner(pte, tokenizer, num_threads=threads), pterun.llm, False),
                "ExecuTorch": (et.TextLLMRunner(str(pte), str(tokenizer)), et, True),
            }
            runs = {way: [] for way in ways}
            texts = {way: [] for way in ways}
            for round_ in range(args.rounds + 1):  # the first round warms up, and checks both say the same
                for way, (runner, module, quiet) in ways.items():
                    config = module.GenerationConfig(echo=False, max_new_tokens=args.new, temperature=0.0)
                    figures = generate(runner, prompt, config, quiet, None if round_ else texts[way])
                    assert figures[2] == args.prompt, f"{way}: {figures[2]} prompt tokens, expected {args.prompt}"
                    if round_:
                        runs[way].append(figures)
            assert len(set(map("".join, texts.values()))) == 1, f"{label}: the runners generated different text"
            assert len(texts["pterun"]) == args.new, f"{label}: {len(texts['pterun'])} pieces, expected {args.new}"
            row = [label, threads]
            for way in ways:
                ttft = statistics.median(r[0] for r in runs[way])
                rate = statistics.median(r[1] for r in runs[way])
                row += [ttft, rate, runs[way][0][3]]
            rows.append(row)
            print(f"{label:14s} {threads} thread(s): pterun TTFT {row[2]:.0f} ms, {row[3]:.1f} tok/s "
                  f"({row[4]} tokens); ExecuTorch TTFT {row[5]:.0f} ms, {row[6]:.1f} tok/s ({row[7]} tokens)",
                  flush=True)
    print(f"\nprompt {args.prompt} tokens, {args.new} new (greedy), medians of {args.rounds} rounds, "
          f"torch {torch.__version__}")
    print("| program | threads | pterun TTFT (ms) | ExecuTorch TTFT (ms) | pterun decode (tok/s) "
          "| ExecuTorch decode (tok/s) | decode pterun / ExecuTorch |\n"
          "| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for label, threads, ttft, rate, _, et_ttft, et_rate, _ in rows:
        print(f"| {label} | {threads} | {ttft:.0f} | {et_ttft:.0f} | {rate:.1f} | {et_rate:.1f} | "
              f"{rate / et_rate:.2f}× |")


if __name__ == "__main__":
    main()
