"""The tiny Whisper exported as optimum-executorch exports it, run by Seq2SeqRunner: the same tokens as transformers'
generate on the eager model, the text its tokenizer decodes, and long audio in 30 s windows."""

from __future__ import annotations

import pytest
import torch

from pterun.asr import TranscribeConfig
from pterun.asr.features import N_SAMPLES
from pterun.format import ProgramFile
from tests.asr.conftest import NEVER_GENERATED, features_of
from tests.support.asr_programs import EOT, IDS, LANGUAGES, MAX_SEQ_LEN, NO_TIMESTAMPS, SOT, TEXT_VOCAB, clip

# Clips 1 and 6 end at EOS at different lengths, 5 runs to the limit; 1 is heard as Spanish, 5 and 6 as English;
# 6 says <|fr|> on its way (the premises are asserted where they matter).
SEEDS = (1, 5, 6)
MAX_NEW = 40


@pytest.fixture(scope="module")
def clip_features(extractor):
    """The feature extractor's features of each 4 s clip, made once."""
    return {seed: features_of(extractor, clip(4, seed)) for seed in SEEDS}


def test_the_program_is_what_optimum_executorch_exports(whisper, runner):
    program = ProgramFile(whisper.pte)
    assert {"encoder", "text_decoder", "sampler", "get_max_seq_len", "get_eos_id",
            "decoder_start_token_id"} <= set(program.method_names)
    decoder = program.plan("text_decoder")
    assert not decoder.delegates and len(decoder.inputs) == 3  # the portable recipe: every kernel in the program
    runner.load()
    signature = runner.signature
    assert (signature.n_mels, signature.n_frames, signature.vocab) == (80, 3000, TEXT_VOCAB + len(IDS))
    assert runner.multilingual and runner.metadata.eos_ids == (EOT,) and runner.metadata.max_seq_len == MAX_SEQ_LEN


@pytest.mark.parametrize("language, task", [(None, "transcribe"), ("fr", "translate")])
def test_the_tokens_are_transformers_generate(runner, clip_features, generate, language, task):
    ended, lengths, detected = 0, set(), set()
    for seed, features in clip_features.items():
        expected = generate(features, MAX_NEW, language, task)
        tokens = runner.transcribe_features(features, TranscribeConfig(language=language, task=task,
                                                                       max_new_tokens=MAX_NEW))
        assert tokens == expected, f"clip {seed}"
        prompt = [SOT, IDS[f"<|{language}|>"] if language else tokens[1], IDS[f"<|{task}|>"], NO_TIMESTAMPS]
        assert tokens[:4] == prompt
        ended += tokens[-1] == EOT
        lengths.add(len(tokens))
        detected.add(tokens[1])
    # The premises: some clips end at EOS and others run to the limit, at different lengths; without a language
    # the clips are heard in more than one.
    assert 0 < ended < len(SEEDS) and len(lengths) >= 3, lengths
    assert language is not None or len(detected) > 1


def test_the_text_is_the_tokenizers_and_streams_as_it_is_decoded(runner, hf_tokenizer):
    found_special = False
    for seed in SEEDS:
        pieces: list[str] = []
        stats: list = []
        result = runner.transcribe(clip(4, seed), config=TranscribeConfig(max_new_tokens=MAX_NEW),
                                   token_callback=pieces.append, stats_callback=stats.append)
        (segment,) = result.segments
        generated = segment.tokens[4:]
        assert result.text == segment.text == "".join(pieces) == hf_tokenizer.decode(list(generated))
        found_special |= any(t >= TEXT_VOCAB and t != EOT for t in generated)
        assert (segment.start, segment.end) == (0.0, 4.0) and segment.language in LANGUAGES
        assert result.language == segment.language
        assert stats[0].num_generated_tokens == len(generated) and stats[0].num_prompt_tokens == 1500
        assert stats[0].inference_end_ms >= stats[0].first_token_ms >= stats[0].inference_start_ms > 0
    # The premise: some transcripts hold markers the text must not show (languages, timestamps).
    assert found_special


def test_long_audio_is_transcribed_in_30_second_windows(runner, extractor, generate):
    audio = torch.cat([clip(30, 1), clip(7.5, 2)])
    result = runner.transcribe(audio, config=TranscribeConfig(max_new_tokens=MAX_NEW))
    assert [(s.start, s.end) for s in result.segments] == [(0.0, 30.0), (30.0, 37.5)]
    language = result.segments[0].language
    assert [s.language for s in result.segments] == [language] * 2  # detected once, kept
    for i, segment in enumerate(result.segments):
        window = audio[i * N_SAMPLES:(i + 1) * N_SAMPLES]
        features = features_of(extractor, window)
        assert list(segment.tokens) == generate(features, MAX_NEW, language), f"window {i}"
    assert result.text == "".join(s.text for s in result.segments)
    assert len({s.tokens for s in result.segments}) == 2, "premise: each window says something else"


def test_generation_stops_where_the_cache_ends(runner, clip_features, generate):
    features = clip_features[5]
    expected = generate(features, MAX_SEQ_LEN - 3, "en")
    assert EOT not in expected, "premise: the clip runs past the cache"
    tokens = runner.transcribe_features(features, TranscribeConfig(language="en", max_new_tokens=200))
    # Four prompt tokens and 45 generated: the last is never fed, so 48 positions hold 49 tokens.
    assert len(tokens) == MAX_SEQ_LEN + 1 and tokens == expected


def test_eos_and_suppression_can_be_chosen(runner, clip_features):
    features = clip_features[1]
    default = runner.transcribe_features(features, TranscribeConfig(language="en", max_new_tokens=MAX_NEW))
    stop_at = default[6]
    early = runner.transcribe_features(features, TranscribeConfig(language="en", max_new_tokens=MAX_NEW,
                                                                  eos_token_ids=(stop_at,)))
    assert early == default[:default.index(stop_at) + 1]
    unsuppressed = runner.transcribe_features(features, TranscribeConfig(
        language="en", max_new_tokens=MAX_NEW, suppress_tokens=(), suppress_blank=False))
    assert unsuppressed[:4] == default[:4]
    banned = runner.transcribe_features(features, TranscribeConfig(language="en", max_new_tokens=MAX_NEW,
                                                                   suppress_tokens=(default[4],)))
    assert default[4] not in banned[4:]


def test_stop_from_the_callback_ends_the_transcription(runner):
    pieces: list[str] = []

    def stop_after_two(piece: str) -> None:
        pieces.append(piece)
        if len(pieces) == 2:
            runner.stop()

    audio = torch.cat([clip(30, 1), clip(5, 4)])
    result = runner.transcribe(audio, config=TranscribeConfig(max_new_tokens=MAX_NEW), token_callback=stop_after_two)
    assert len(pieces) == 2 and len(result.segments) == 1
    again = runner.transcribe(audio, config=TranscribeConfig(max_new_tokens=MAX_NEW))
    assert len(again.segments) == 2  # the next call starts afresh


def test_sampling_is_seeded(runner):
    config = TranscribeConfig(language="en", max_new_tokens=MAX_NEW, temperature=1.0, seed=7)
    first = runner.transcribe(clip(4, 3), config=config)
    assert runner.transcribe(clip(4, 3), config=config) == first


def test_a_model_without_language_tokens_is_prompted_as_english_only(whisper, clip_features, eager, hf_tokenizer,
                                                                     tmp_path):
    import copy
    import json

    from pterun.asr import Seq2SeqRunner
    from pterun.errors import InvalidArgument

    # The same vocabulary with its language markers renamed: the runner sees no languages, as an English-only
    # Whisper's tokenizer gives the model none to choose.
    document = json.loads(whisper.tokenizer.read_text())
    for token in document["added_tokens"]:
        if token["content"] in {f"<|{code}|>" for code in LANGUAGES}:
            token["content"] = f"<|language-{token['id']}|>"
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(document))
    english = Seq2SeqRunner(whisper.pte, path)
    features = clip_features[1]
    tokens = english.transcribe_features(features, TranscribeConfig(max_new_tokens=MAX_NEW))
    assert not english.multilingual and tokens[:2] == [SOT, NO_TIMESTAMPS]
    # An English-only checkpoint's generation config: no languages, no tasks (generate fills what a config passed
    # to it leaves unset from the model's own, so the model gets it).
    model = copy.deepcopy(eager)
    model.generation_config.is_multilingual = False
    del model.generation_config.lang_to_id, model.generation_config.task_to_id
    (blank,) = hf_tokenizer.encode(" ").ids
    with torch.no_grad():
        expected = model.generate(features, max_new_tokens=MAX_NEW, suppress_tokens=NEVER_GENERATED,
                                  begin_suppress_tokens=[blank, EOT], return_dict_in_generate=True).sequences
    assert tokens == expected[0].tolist()
    with pytest.raises(InvalidArgument, match="English-only model: it transcribes English, found language='de'"):
        english.transcribe_features(features, TranscribeConfig(language="de"))
