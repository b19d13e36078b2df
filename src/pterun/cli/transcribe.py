"""`pterun transcribe`: speech in a WAV file to text with an exported Whisper program, streamed as it is decoded.

The transcript goes to stdout and the stats line to stderr, so that ``pterun transcribe ... > text.txt``
keeps only the text. Text from the model passes through ``visible``: a tokenizer's pieces can hold control
characters, which reach the terminal as escapes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Optional

import typer

from pterun.asr.config import DEFAULT_MAX_NEW_TOKENS
from pterun.cli.options import DeviceName, TrustNativeCode, device_option
from pterun.cli.report import errors, esc, reported, visible


def transcribe(
    audio: Path = typer.Argument(..., help="The WAV file (any rate and channel count: mixed down to 16 kHz mono)."),
    program: Path = typer.Argument(..., help="The Whisper .pte file (methods encoder and text_decoder)."),
    tokenizer: Path = typer.Option(
        ..., "--tokenizer", "-t", help="The model's tokenizer.json, or a directory holding it."
    ),
    language: Optional[str] = typer.Option(
        None, "--language", "-l", help="Language code of the speech (en, de, ...); detected when left out."
    ),
    task: str = typer.Option("transcribe", "--task", help="transcribe, or translate (into English)."),
    max_new_tokens: int = typer.Option(
        DEFAULT_MAX_NEW_TOKENS, "--max-new-tokens", "-n", help="At most this many tokens per 30 s window."
    ),
    temperature: float = typer.Option(0.0, "--temperature", help="0 picks the likeliest token; above 0 samples."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Seed of the sampler (with --temperature above 0)."),
    data: Optional[Path] = typer.Option(None, "--data", "-d", help="The .ptd file with the model's weights."),
    device: DeviceName = None,
    as_json: bool = typer.Option(
        False, "--json", help="Print the transcript as JSON (text, language, segments) instead of the stats line."
    ),
    trust_native_code: TrustNativeCode = False,
) -> None:
    """Transcribe speech with an exported Whisper model, streaming the text as it is decoded.

    Long recordings are transcribed in consecutive 30 s windows, as Whisper does.

    **Examples**

    ```
    pterun transcribe speech.wav whisper.pte -t tokenizer.json
    pterun transcribe talk.wav model.pte -t whisper/ -l de --task translate
    ```
    """
    from pterun.asr import SAMPLE_RATE, Seq2SeqRunner, TranscribeConfig, load_wav

    with reported():
        device = device_option(device)
        samples = load_wav(audio)
        runner = Seq2SeqRunner(program, tokenizer, data, device=device, trust_native_code=trust_native_code)
        config = TranscribeConfig(language=language, task=task, max_new_tokens=max_new_tokens,
                                  temperature=temperature, seed=seed)
        out = sys.stderr if as_json else sys.stdout

        def piece(text: str) -> None:
            out.write(visible(text, lines=True))
            out.flush()

        stats_seen: list = []
        result = runner.transcribe(samples, config=config, token_callback=piece, stats_callback=stats_seen.append)
    out.write("\n")
    if as_json:
        segments = [{"start": s.start, "end": s.end, "language": s.language, "text": s.text, "tokens": list(s.tokens)}
                    for s in result.segments]
        print(json.dumps({"text": result.text, "language": result.language, "segments": segments}))
        return
    duration = len(samples) / SAMPLE_RATE
    errors.print(esc(stats_line(stats_seen[-1], duration, len(result.segments))), style="dim", highlight=False)


def stats_line(stats, duration: float, windows: int) -> str:
    """The audio's length and windows, the tokens decoded, and how fast against real time."""
    elapsed = stats.inference_end_ms - stats.inference_start_ms
    speed = f"{duration * 1000 / elapsed:.1f}x real time" if elapsed > 0 else "—"
    return (f"{duration:.1f} s of audio in {windows} window{'s' if windows != 1 else ''}, "
            f"{stats.num_generated_tokens} tokens in {elapsed} ms ({speed})")


__all__ = ["stats_line", "transcribe"]
