"""`pterun generate`: text from an exported language model, streamed as it is produced, then one stats line.

A multimodal program (MultimodalRunner's) takes images and audio besides the prompt (--image, --audio); each
goes where the prompt says ``<image>`` or ``<audio>``, or before the prompt where it says neither.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any, Optional

import typer

from pterun.cli.options import DeviceName, TrustNativeCode, device_option, example_llm
from pterun.cli.report import UserError, console, esc, reported
from pterun.errors import PteError


def generate(
    program: Optional[Path] = typer.Argument(
        None, help="The LLM .pte file (ExecuTorch's or optimum-executorch's export); else the bundled example."
    ),
    tokenizer: Optional[Path] = typer.Option(
        None, "--tokenizer", "-t",
        help="tokenizer.json, a tiktoken or SentencePiece model, or Llama 2's tokenizer.bin (the example's with it).",
    ),
    prompt: str = typer.Option(
        "Once upon a time", "--prompt", "-p",
        help="The text to continue; `<image>` and `<audio>` mark where each --image and --audio goes (else first).",
    ),
    images: Optional[list[Path]] = typer.Option(
        None, "--image", help="An image for a multimodal program (read with Pillow); repeat for several."
    ),
    audios: Optional[list[Path]] = typer.Option(
        None, "--audio", help="Audio for a multimodal program: a .wav (with --audio-processor) or a tensor of features."
    ),
    audio_processor: Optional[Path] = typer.Option(
        None, "--audio-processor", help="The program turning a .wav's samples into the audio encoder's features."
    ),
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

    A multimodal program (token_embedding, text_decoder and a vision or audio encoder) also takes images and audio.

    **Examples**

    ```
    pterun generate --prompt "Once upon a time"
    pterun generate model.pte -t tokenizer.json -p "Hello" -n 128 --device cuda
    pterun generate vlm.pte -t tok.json --image cat.jpg -p "<image> Describe it"
    pterun generate vox.pte -t tekken.json --audio a.wav --audio-processor p.pte
    ```
    """
    from pterun.llm import GenerationConfig, MultimodalRunner, TextLLMRunner
    from pterun.llm.probe import language_model_kind

    stats_seen: list = []
    with reported():
        if program is None:
            program, example_tokenizer = example_llm()
            tokenizer = tokenizer or example_tokenizer
        if tokenizer is None:
            raise UserError("--tokenizer is needed with a program of your own")
        device = device_option(device)
        options: dict[str, Any] = dict(device=device, seed=seed, trust_native_code=trust_native_code)
        weights = None if data is None else str(data)
        config = GenerationConfig(echo=echo, max_new_tokens=max_new_tokens, seq_len=seq_len, temperature=temperature)
        out = sys.stderr if as_json else sys.stdout

        def piece(text: str) -> None:
            out.write(text)
            out.flush()

        if _is_multimodal(program, language_model_kind):
            runner = MultimodalRunner(str(program), str(tokenizer), weights, **options)
            inputs = _multimodal_inputs(runner, prompt, images or [], audios or [], audio_processor)
            runner.generate(inputs, config, token_callback=piece, stats_callback=stats_seen.append)
        else:
            if images or audios:
                raise UserError(f"{program.name} is a text model (no vision_encoder or audio_encoder): --image and "
                                f"--audio need a multimodal program")
            runner = TextLLMRunner(str(program), str(tokenizer), weights, **options)
            runner.generate(prompt, config, token_callback=piece, stats_callback=stats_seen.append)
    out.write("\n")
    stats = stats_seen[-1] if stats_seen else None
    if stats is None:
        return
    if as_json:
        print(stats.to_json_string())
        return
    console.print(esc(stats_line(stats)), style="dim", highlight=False)


def _is_multimodal(program: Path, language_model_kind) -> bool:
    from pterun import Runtime

    try:
        names = Runtime.get().load_program(program).method_names
    except PteError:
        return False  # the runner's load says what is wrong with it
    return language_model_kind(names) == "multimodal"


_MARK = re.compile(r"(<image>|<audio>)")


def _multimodal_inputs(runner, prompt: str, images: list[Path], audios: list[Path], processor_path) -> list:
    """The prompt's text and the media in order: at the prompt's marks, else the media first."""
    from pterun.cli.media import read_audio, read_image
    from pterun.llm import make_audio_input, make_image_input, make_text_input
    from pterun.llm.methods import AUDIO_ENCODER, VISION_ENCODER

    names = runner.program.method_names
    for paths, option, method in ((images, "--image", VISION_ENCODER), (audios, "--audio", AUDIO_ENCODER)):
        if paths and method not in names:
            raise UserError(f"{option}: the program has no {method} method (methods: {', '.join(sorted(names))})")
    processor = None
    if processor_path is not None:
        from pterun import Runtime

        processor = Runtime.get().load_program(processor_path)
    media = {"<image>": [make_image_input(read_image(p, runner.program, VISION_ENCODER)) for p in images],
             "<audio>": [make_audio_input(read_audio(p, processor)) for p in audios]}
    parts = _MARK.split(prompt)
    marks = {mark: parts.count(mark) for mark in media}
    if not any(marks.values()):
        text = [make_text_input(prompt)] if prompt else []
        return media["<image>"] + media["<audio>"] + text
    for mark, count in marks.items():
        if count != len(media[mark]):
            option = "--image" if mark == "<image>" else "--audio"
            raise UserError(f"--prompt has {count} {mark} mark(s) for {len(media[mark])} {option} file(s)")
    queues = {mark: iter(values) for mark, values in media.items()}
    return [next(queues[part]) if part in queues else make_text_input(part) for part in parts if part]


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
