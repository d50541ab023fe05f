"""End to end on tiny random models made by our converters: text -> qwen2 GGUF -> codes -> wavtokenizer GGUF
-> audio."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "parity"))
from _tiny_outetts import N_CODES, build_qwen2_checkpoint, build_wavtokenizer_ckpt

import ggtts
from ggtts.convert.outetts_hf import convert_outetts_hf
from ggtts.convert.wavtokenizer_ckpt import convert_wavtokenizer_ckpt
from ggtts.errors import GGTTSError, InputError
from ggtts.families.base import NothingToSay
from ggtts.families.outetts.decode import decode_codes_cli
from ggtts.families.outetts.pipeline import OuteTTS, decode_codes
from ggtts.gguf import GGUFFile
from ggtts.models.wavtokenizer.model import WavTokenizerDecoder
from ggtts.runtime.streaming import WindowedDecoder
from ggtts.text.lexicon import Lexicon

HOP = 320
TINY_SPEAKER = Path(__file__).parent / "data" / "tiny_speaker.json"
OPTS = {"seed": 3, "top_k": 0, "temperature": 1.0, "max_new_tokens": 80, "silence_start_s": 0.0}


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("oute")
    lm = convert_outetts_hf(build_qwen2_checkpoint(d / "hf"), d / "models" / "outetts-tiny.gguf", "q8_0")
    voc = convert_wavtokenizer_ckpt(build_wavtokenizer_ckpt(d / "w.ckpt"), d / "models" / "wavtok-tiny.gguf", "f16")
    return lm, voc


@pytest.fixture(scope="module")
def tts(files: tuple[Path, Path]) -> OuteTTS:
    model = ggtts.load(files[0])  # the outetts record recognises the qwen2 file; the vocoder is found beside it
    assert isinstance(model, OuteTTS) and model.vocoder is not None
    assert (model.family_name, model.architecture) == ("outetts", "qwen2")  # the public name is the family's
    with pytest.raises(InputError, match="lacks"):  # the built-in speaker's codes go up to 1832
        model.synthesize("hello")
    model._speakers.clear()
    model.add_speaker(TINY_SPEAKER)
    return model


def test_audio_is_hop_samples_per_generated_code(tts: OuteTTS) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        codes = [c for chunk in tts.generate_codes("Hello world, 42 times.", **OPTS) for c in chunk]
        audio = tts.synthesize("Hello world, 42 times.", **OPTS)
    assert len(codes) > 0
    assert all(0 <= c < N_CODES for c in codes)
    assert len(audio) == HOP * len(codes)
    assert audio.sample_rate == 24000 and np.isfinite(audio.samples).all()


def test_same_seed_same_audio(tts: OuteTTS) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = tts.synthesize("one two", **OPTS).samples
        b = tts.synthesize("one two", **OPTS).samples
        unseeded = {k: v for k, v in OPTS.items() if k != "seed"}
        c = tts.synthesize("one two", **unseeded).samples  # the record's default seed, 0: reproducible too
        d = tts.synthesize("one two", **unseeded, seed=0).samples
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(c, d)


def test_stream_concatenates_to_hop_per_code_and_stays_close(tts: OuteTTS) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        parts = list(tts.stream("Hello world, 42 times.", chunk_codes=4, left_context=8, lookahead=4, **OPTS))
        one_shot = tts.synthesize("Hello world, 42 times.", **OPTS).samples
    streamed = np.concatenate([p.samples for p in parts])
    assert len(parts) > 1 and len(streamed) == len(one_shot)
    error = (streamed - one_shot).astype(np.float64)
    snr = 10 * np.log10(np.sum(one_shot.astype(np.float64) ** 2) / np.sum(error**2))
    print(f"streamed (chunk 4, left 8, lookahead 4) vs one-shot: SNR {snr:.1f} dB")
    # 17.0 dB measured: GroupNorm and attention see only the window. A chunk lost, repeated or shifted by a
    # sample gives about 0 dB.
    assert snr > 12


def test_windowed_decode_difference_is_small(files: tuple[Path, Path]) -> None:
    """Windowed vs one-shot decoding of 200 codes: same length, small error (measured and printed)."""
    voc = WavTokenizerDecoder.from_gguf(GGUFFile(files[1]))
    codes = torch.randint(0, N_CODES, (200,), generator=torch.Generator().manual_seed(0)).tolist()
    ref = torch.from_numpy(decode_codes(voc, codes))
    with torch.no_grad():
        w = WindowedDecoder(voc, HOP, chunk=40, left=24, lookahead=8)
        pieces = [p for i in range(0, 200, 7) for p in w.push(codes[i : i + 7])] + list(w.flush())
    got = torch.cat(pieces)
    assert got.shape == ref.shape
    snr = 10 * torch.log10(ref.pow(2).sum() / (got - ref).pow(2).sum())
    print(f"windowed (chunk 40, left 24, lookahead 8) vs one-shot: SNR {float(snr):.1f} dB")
    assert snr > 10


def test_out_of_range_codes_from_the_lm_are_dropped_with_a_warning(tts: OuteTTS) -> None:
    assert len([c for c in tts.codes.code_of.values() if c >= N_CODES]) == 4  # <|96|>..<|99|> exist in the LM
    kept, dropped = tts.codes.codes([tts.tokenizer.special["<|97|>"], tts.tokenizer.special["<|5|>"]], N_CODES)
    assert kept == [5] and dropped == 1


def test_very_short_output_does_not_break_silencing(tts: OuteTTS) -> None:
    audio = tts.synthesize("hi", **{**OPTS, "max_new_tokens": 2, "silence_start_s": 0.25})
    assert len(audio) % HOP == 0  # possibly 0 codes: empty audio, no error


def test_guide_tokens_force_word_starts(tts: OuteTTS) -> None:
    _, guide = tts.prompt_tokens("hello world", tts._speaker(None), tts.version)
    # a speaker file ends its audio with a newline, so no extra "\n" guide (llama-tts would add a second one)
    assert guide == [tts.tokenizer.encode("hello")[0], tts.tokenizer.encode("world")[0]]
    newline = tts.tokenizer.encode("\n")[0]
    rewrite = tts._guide(guide)
    normal = tts.tokenizer.encode("zzz")[0]
    control = tts.tokenizer.special["<|code_end|>"]
    assert rewrite(normal, []) == guide[0]  # first sampled token: forced to the first word
    assert rewrite(control, []) == control  # control tokens are never replaced
    assert rewrite(normal, []) == normal  # not after a newline: left alone
    assert rewrite(newline, []) == newline
    assert rewrite(normal, []) == guide[1]  # after a newline: the next word's first token
    assert rewrite(newline, []) == newline
    assert rewrite(normal, []) == normal  # guide exhausted


def test_speed_and_missing_vocoder_are_clear_errors(tts: OuteTTS, files: tuple[Path, Path], tmp_path: Path) -> None:
    with pytest.raises(InputError, match="speed"):
        tts.synthesize("hello", speed=1.5)
    lonely = tmp_path / "lm.gguf"
    lonely.write_bytes(files[0].read_bytes())
    model = ggtts.load(lonely)
    with pytest.raises(GGTTSError, match="vocoder"):
        model.synthesize("hello", **OPTS)
    with pytest.raises(InputError, match="the vocoder is chosen at load"):  # never swapped by a request
        model.synthesize("hello", vocoder=files[1], **OPTS)
    assert model.vocoder is None
    with pytest.raises(InputError, match="a speaker file is given at load"):  # a voice is a name, never a path
        tts.synthesize("hello", voice=str(TINY_SPEAKER), **OPTS)
    loaded = ggtts.load(lonely, vocoder=files[1], speaker=TINY_SPEAKER)
    assert len(loaded.synthesize("hello", vocoder=files[1], **OPTS)) % HOP == 0  # the one loaded: fine


def test_decode_cli(files: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "out.wav"
    audio = decode_codes_cli(files[1], "<|1|><|2|><|3|>", out)
    assert len(audio) == 3 * HOP and out.stat().st_size > 44
    codes_file = tmp_path / "codes.txt"
    codes_file.write_text("5 6 7 8\n")
    assert len(decode_codes_cli(files[1], str(codes_file))) == 4 * HOP
    with pytest.raises(InputError, match=f"code {N_CODES} is out of range"):
        decode_codes_cli(files[1], f"1 {N_CODES}")
    with pytest.raises(GGTTSError, match="wavtokenizer-dec"):
        decode_codes_cli(files[0], "1 2")


def test_the_vocoders_attention_keeps_no_square_of_the_codes(
    files: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The posnet's attention gets contiguous queries, keys and values: over strided views torch's CPU attention
    took its plain path, every (T, T) score in memory (3.7 GB for 20,000 codes of the tiny vocoder; 200,000 asked
    for 160 GB)."""
    import torch.nn.functional as F

    from ggtts.models.wavtokenizer import model as wavtokenizer

    seen: list[bool] = []
    attention = F.scaled_dot_product_attention

    def spy(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        seen.append(all(t.is_contiguous() for t in (q, k, v)))
        return attention(q, k, v, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(wavtokenizer.F, "scaled_dot_product_attention", spy)
    assert len(decode_codes_cli(files[1], " ".join(["5"] * 300))) == 300 * HOP
    assert seen and all(seen)


def test_load_takes_a_vocoder_option(files: tuple[Path, Path], tmp_path: Path) -> None:
    lonely = tmp_path / "lm.gguf"  # no vocoder beside it: only the option gives one
    lonely.write_bytes(files[0].read_bytes())
    model = ggtts.load(lonely, vocoder=files[1], speaker=TINY_SPEAKER)
    assert isinstance(model, OuteTTS) and model.vocoder is not None
    builtin = ggtts.load(lonely, vocoder=files[1]).voices
    assert len(builtin) == 1 and model.voices[1:] == builtin  # the speaker loaded comes first: the default voice
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        audio = model.synthesize("hello", **OPTS)
    assert len(audio) % HOP == 0 and audio.sample_rate == 24000
    with pytest.raises(InputError, match="bogus"):
        ggtts.load(lonely, bogus=1)


def test_unknown_options_are_errors(tts: OuteTTS) -> None:
    with pytest.raises(InputError, match=r"unknown option 'temprature'.*temperature"):
        tts.synthesize("hello", temprature=0.5)
    with pytest.raises(InputError, match=r"unknown option 'temprature'.*lookahead"):
        list(tts.stream("hello", temprature=0.5))
    with pytest.raises(InputError, match="unknown option 'chunk_codes'"):  # windowing is stream's alone
        tts.synthesize("hello", chunk_codes=4)
    with pytest.raises(InputError, match="not phonemes"):
        tts.synthesize("hello", phonemes=True)
    with pytest.raises(InputError, match="lang"):
        list(tts.stream("hello", lang="a"))


def test_progress_bar_over_tokens(tts: OuteTTS, capsys: pytest.CaptureFixture[str]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with_bar = tts.synthesize("one two", progress=True, **OPTS).samples
        without = tts.synthesize("one two", progress=False, **OPTS).samples
    np.testing.assert_array_equal(with_bar, without)
    assert "token" in capsys.readouterr().err


def test_text_with_nothing_to_say_is_an_input_error(tts: OuteTTS) -> None:
    """build_prompt's own check (tests/outetts/test_prompt.py), seen through synthesize and stream."""
    with pytest.raises(NothingToSay, match="nothing to say"):  # (the code nothing_to_say in the server)
        tts.synthesize("... ?! —")
    with pytest.raises(NothingToSay, match="nothing to say"):
        next(tts.stream("''' !!!"))


def test_gpu_load_options_are_refused_on_the_cpu_with_one_line(files: tuple[Path, Path]) -> None:
    """precision and compile are OuteTTS's CUDA options: on the CPU each step is one ggml graph already."""
    with pytest.raises(InputError, match="compile is for OuteTTS on CUDA"):
        ggtts.load(files[0], device="cpu", compile=True)
    with pytest.raises(InputError, match=r"precision bfloat16 is for OuteTTS on CUDA|no native bfloat16"):
        ggtts.load(files[0], device="cpu", precision="bfloat16")
    with pytest.raises(InputError, match="unknown precision"):
        ggtts.load(files[0], device="cpu", precision="float16")


def test_several_models_refuse_outetts_cpu_options_before_any_loads(
    files: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ggtts serve -m kokoro -m oute.gguf --compile` on a CPU (and a batch job of both): OuteTTS's refusal is made
    before the first model loads, not after Kokoro has loaded and compiled."""
    from ggtts import api
    from ggtts.batch.items import Item
    from ggtts.batch.job import check_job
    from ggtts.batch.work import JobSettings
    from ggtts.server import load_models
    from skeleton_gguf import skeleton_gguf

    kokoro = skeleton_gguf(tmp_path / "kokoro.gguf")
    loaded: list[str] = []
    monkeypatch.setattr(api, "load", lambda source, **options: loaded.append(source))
    with pytest.raises(InputError, match=r"^model 'oute': compile is for OuteTTS on CUDA"):
        load_models([f"k={kokoro}", f"oute={files[0]}"], {"compile": True, "device": "cpu"})
    cpu_refusal = r"^model '(oute': precision bfloat16 is for OuteTTS on CUDA|k': this cpu has no native bfloat16)"
    with pytest.raises(InputError, match=cpu_refusal):
        load_models([f"k={kokoro}", f"oute={files[0]}"], {"precision": "bfloat16", "device": "cpu"})
    assert loaded == []
    settings = JobSettings(out_dir=str(tmp_path / "out"), model=str(kokoro), load_options={"compile": True})
    items = [Item(id="a", text="Kokoro's."), Item(id="b", text="OuteTTS's.", model=str(files[0]))]
    monkeypatch.setattr("ggtts.runtime.device.resolve_device", lambda name: "cpu")
    with pytest.raises(InputError, match=r"\(the model of item 'b'\): compile is for OuteTTS on CUDA"):
        check_job(settings, items=items)


def test_markup_is_taken_away_before_the_prompt(tts: OuteTTS, monkeypatch: pytest.MonkeyPatch) -> None:
    """An LLM's reply: its Markdown and HTML never reach the prompt (llama.cpp's text processing read a link's
    address and a tag's name as words); ``normalization=False`` keeps them."""
    seen: list[str] = []
    prompt_tokens = tts.prompt_tokens
    monkeypatch.setattr(tts, "prompt_tokens", lambda text, *a: seen.append(text) or prompt_tokens(text, *a))
    options = {**OPTS, "max_new_tokens": 2}
    tts.synthesize("**Hello** <b>world</b>, [see](https://example.com) ✅", **options)
    tts.synthesize("**Hello** <b>world</b>", **options, normalization=False)
    monkeypatch.setattr(tts, "lexicon", Lexicon.of({"world": "planet"}))  # (a lexicon's words: first, always)
    tts.synthesize("**Hello** <b>World</b>", **options, normalization=False)
    assert seen == ["Hello world, see", "**Hello** <b>world</b>", "**Hello** <b>planet</b>"]
