"""Speech recognition from exported Whisper-style encoder-decoder programs (docs/asr.md)."""

from pterun.asr.audio import load_wav, resample
from pterun.asr.config import TranscribeConfig
from pterun.asr.features import SAMPLE_RATE, log_mel_spectrogram, mel_filters
from pterun.asr.runner import Segment, Seq2SeqRunner, Transcription

__all__ = ["SAMPLE_RATE", "Segment", "Seq2SeqRunner", "TranscribeConfig", "Transcription", "load_wav",
           "log_mel_spectrogram", "mel_filters", "resample"]
