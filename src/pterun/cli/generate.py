"""`pterun generate`: text from an exported language model, streamed as it is produced, then one stats line."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer

from pterun.cli.options import DeviceName, TrustNativeCode, device_option, example_llm
from pterun.cli.report import UserError, console, esc, reported


def generate(
    program: Optional[Path] = typer.Argument(
        None, help="The LLM .pte file (ExecuTorch's LLM export); the bundled example LLM when left out."
    ),
    tokenizer: Optional[Path] = typer.Option(
        None, "--tokenizer", "-t",
        help="tokenizer.json, a tiktoken or SentencePiece model, or Llama 2's tokenizer.bin (the example's with it).",
    ),
    prompt: str = typer.Option("Once upon a time", "--prompt", "-p", help="The text to continue."),
    max_new_tokens: int = typer.Option(
        64, "--max-new-tokens", "-n", help="At most this many new tokens (-1: until the context is full)."
    ),
    temperature: float = typer.Option(0.0, "--temperature", help="0 picks the likeliest token; above 0 samples."),
    seq_len: int = typer.Option(
        -1, "--seq-len", help="At most this many tokens in all, prompt included (-1: the model's)."
    ),
    echo: bool = typer.Option(True, "--echo/--no-echo", help="Print the prompt before what is generated."),
    seed: Optional[int] = typer.Option(
        None, "--seed", help="Seed of the sampler (with --temperature above 0); by default the time, as ExecuTorch's."
    ),
    data: Optional[Path] = typer.Option(None, "--data", "-d", help="The .ptd file with the model's weights."),
    device: DeviceName = None,
    as_json: bool = typer.Option(False, "--json", help="Print the run's Stats as JSON instead of the stats line."),
    trust_native_code: TrustNativeCode = False,
) -> None:
    """Generate text from an exported LLM, streaming tokens as they come, and end with one stats line.

    **Examples**

    ```
    pterun generate --prompt "Once upon a time"
    pterun generate model.pte -t tokenizer.json -p "Hello" -n 128 --device cuda
    ```
    """
    from pterun.llm import GenerationConfig, TextLLMRunner

    stats_seen: list = []
    with reported():
        if program is None:
            program, example_tokenizer = example_llm()
            tokenizer = tokenizer or example_tokenizer
        if tokenizer is None:
            raise UserError("--tokenizer is needed with a program of your own")
        device = device_option(device)
        runner = TextLLMRunner(str(program), str(tokenizer), None if data is None else str(data), device=device,
                               seed=seed, trust_native_code=trust_native_code)
        config = GenerationConfig(echo=echo, max_new_tokens=max_new_tokens, seq_len=seq_len, temperature=temperature)
        out = sys.stderr if as_json else sys.stdout

        def piece(text: str) -> None:
            out.write(text)
            out.flush()

        runner.generate(prompt, config, token_callback=piece, stats_callback=stats_seen.append)
    out.write("\n")
    stats = stats_seen[-1] if stats_seen else None
    if stats is None:
        return
    if as_json:
        print(stats.to_json_string())
        return
    console.print(esc(stats_line(stats)), style="dim", highlight=False)


def stats_line(stats) -> str:
    """Prompt and generated token counts, time to first token, and prefill and decode rates."""
    ttft = stats.first_token_ms - stats.inference_start_ms
    prefill = stats.prompt_eval_end_ms - stats.inference_start_ms
    decode = stats.inference_end_ms - stats.prompt_eval_end_ms
    generated = stats.num_generated_tokens

    def rate(tokens: int, ms: int) -> str:
        return f"{tokens * 1000 / ms:.1f} tok/s" if ms > 0 else "—"

    # The rates ExecuTorch's runner reports (its Stats JSON): prompt tokens over the prefill, generated tokens
    # over the time after it.
    return (f"{stats.num_prompt_tokens} prompt tokens, {generated} generated; first token after {ttft} ms; "
            f"prefill {rate(stats.num_prompt_tokens, prefill)}, decode {rate(generated, decode)}")


__all__ = ["generate", "stats_line"]
