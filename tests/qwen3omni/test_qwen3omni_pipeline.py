"""Qwen3-Omni end to end against transformers: a tiny random ``Qwen3OmniMoeForConditionalGeneration`` and its
tokenizer saved as a real checkpoint, converted by ``ggtts convert qwen3omni-thinker`` / ``qwen3omni-talker`` into
real GGUF files, loaded by ``ggtts.load`` (:mod:`ggtts.measure.qwen3omni.parity` builds it, as ``ggtts parity
qwen3omni`` does). Greedy and sampled generations are compared code for code with transformers' ``generate(...,
return_audio=True)``; the rest is the pipeline's behaviour (streaming, voices, modes, files, errors)."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import re
import subprocess
import sys
import warnings
from collections.abc import Callable
from contextlib import redirect_stderr
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from ggtts.measure.forcing import Forcing, draw_margin
from ggtts.measure.qwen3omni.parity import forced_codes, frame_forcings
from ggtts.text.lexicon import Lexicon
from near_ties import relative_difference as _relative

pytestmark = pytest.mark.needs_reference

TEXT = "Hello, world! How are you today?"


@dataclass
class Tiny:
    upstream: Any
    tts: Any
    work: Path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Tiny:
    pytest.importorskip("transformers", reason="needs transformers to build the reference model")
    from ggtts.measure.qwen3omni.parity import build

    work = tmp_path_factory.mktemp("qwen3omni")
    upstream, tts = build(work)
    return Tiny(upstream, tts, work)


def _prompt(tts: Any, text: str = TEXT) -> list[int]:
    from ggtts.families.qwen3omni.prompt import chat_prompt

    return chat_prompt(lambda s: tts.tokenizer.encode(s, parse_special=False), tts.talker.cfg, text)


def test_every_stage_matches_transformers(tiny: Tiny) -> None:
    from ggtts.measure.qwen3omni.parity import stages

    results = stages(tiny.upstream, tiny.tts)
    bad = [(r.stage, r.relative) for r in results if not r.ok]
    assert not bad, bad
    names = {r.stage for r in results}
    assert {"thinker.logits", "thinker.reply", "talker.logits", "codes", "audio", "c2w.chunked"} <= names
    assert {"audio.features", "audio.encoder", "thinker.audio.logits", "thinker.audio.reply", "audio.codes",
            "audio.audio"} <= names  # fmt: skip
    for stage in ("codes", "audio.codes"):
        codes = next(r for r in results if r.stage == stage)
        assert codes.shape == [1, 4, 40]  # all 40 frames, every codebook: no early EOS made the check short
    heard = next(r for r in results if r.stage == "audio.encoder")
    assert heard.shape == [33, 32]  # 2.53 s: two whole chunks (13 rows each) and 53 frames (7 rows)


def _question_wav(path: Path) -> Path:
    import soundfile

    from ggtts.measure.qwen3omni.parity import question_audio

    soundfile.write(path, question_audio(), 16000, subtype="FLOAT")
    return path


def test_cli_chat_prints_the_answer_to_audio_and_speaks_it(tiny: Tiny, tmp_path: Path) -> None:
    """``ggtts chat --audio``: the printed answer is ``model.chat``'s greedy answer to the same audio and text (the
    same arithmetic: exact), decoded by the checkpoint's own tokenizer; the spoken answer is written. That answer is
    upstream's token for token, near-ties forgiven: the ``thinker.audio.reply`` stage above."""
    from tokenizers import Tokenizer

    from ggtts.measure.qwen3omni.parity import QUESTION, question_audio

    local = tiny.tts.chat(QUESTION, audio=question_audio(), max_reply_tokens=12, speak=False)
    expected = Tokenizer.from_file(str(tiny.work / "checkpoint" / "tokenizer.json")).decode(
        [t for t in local.tokens if t != tiny.tts.talker.cfg.im_end], skip_special_tokens=False
    )
    question, out = _question_wav(tmp_path / "question.wav"), tmp_path / "answer.wav"
    cmd = [sys.executable, "-m", "ggtts.cli", "chat", "-m", str(tiny.work / "thinker.gguf"), "--audio", str(question),
           "--text", QUESTION, "--max-reply-tokens", "12", "-o", str(out)]  # fmt: skip
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.rstrip("\n") == expected
    import soundfile

    audio, rate = soundfile.read(out)
    assert rate == 24000 and len(audio) > 0


def test_chat_answers_text_as_mode_chat_does(tiny: Tiny) -> None:
    reply = tiny.tts.chat(TEXT, max_reply_tokens=12, temperature=0, max_frames=3)
    prompt = _prompt(tiny.tts)
    assert reply.tokens == tiny.tts._load_thinker().greedy(prompt, 12, [tiny.tts.talker.cfg.im_end])
    assert reply.prompt_tokens == len(prompt) and reply.finished == (reply.tokens[-1] == tiny.tts.talker.cfg.im_end)
    assert sum(a.samples.size for a in reply.audio) == tiny.tts.code2wav.cfg.output_length(3)
    quiet = tiny.tts.chat(TEXT, max_reply_tokens=12, speak=False)
    assert quiet.text == reply.text and list(quiet.audio) == []


def test_chat_refuses_what_it_cannot_hear_with_one_clear_error(tiny: Tiny, tmp_path: Path) -> None:
    from ggtts.api import load
    from ggtts.errors import GGUFError, InputError
    from ggtts.measure.qwen3omni.parity import question_audio

    tts = tiny.tts
    with pytest.raises(InputError, match="give the question as text, audio, or both"):
        tts.chat("  ")
    with pytest.raises(InputError, match="is silent"):
        tts.chat(audio=np.zeros(16000, np.float32))
    with pytest.raises(InputError, match="not an audio file that can be decoded"):
        tts.chat(audio=b"RIFF....WAVEfmt nothing")
    with pytest.raises(InputError, match=r"takes \d+ of the thinker's 4096 positions"):
        tts.chat(audio=question_audio(), max_reply_tokens=8192)
    with pytest.raises(InputError, match="max_reply_tokens"):
        tts.chat(audio=question_audio(), max_reply_tokens=0)
    alone = tmp_path / "alone"
    alone.mkdir()
    for name in ("thinker.gguf", "talker.gguf"):
        (alone / name).symlink_to(tiny.work / name)
    from ggtts.gguf.write import ModelWriter

    vision = ModelWriter(alone / "mmproj-vision.gguf", "clip")  # another model's mmproj beside it: not its ears
    vision.meta.add_bool("clip.has_vision_encoder", True)
    vision.add_tensor("v.blk.0.attn_q.weight", torch.ones(32, 32))
    vision.write()
    deaf = load(alone / "thinker.gguf")
    assert "mmproj" not in deaf.info()
    with pytest.raises(GGUFError, match="has no audio encoder"):
        load(alone / "thinker.gguf", mmproj=str(alone / "mmproj-vision.gguf"))  # named: refused at load
    with pytest.raises(InputError, match="needs its audio encoder: put the mmproj GGUF"):
        deaf.chat(audio=question_audio())
    assert deaf.chat(TEXT, max_reply_tokens=2, speak=False).tokens  # text still works
    with pytest.raises(InputError, match="differs from the one loaded"):
        tts.chat(TEXT, mmproj=str(tmp_path / "other.gguf"))


def test_cli_chat_says_what_is_wrong_before_loading(
    tiny: Tiny, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import soundfile

    import ggtts
    from ggtts.cli import main

    def no_load(*_args: Any, **_kwargs: Any) -> None:
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(ggtts, "load", no_load)

    thinker = str(tiny.work / "thinker.gguf")
    silent = tmp_path / "silent.wav"
    soundfile.write(silent, np.zeros(16000, np.float32), 16000)
    (tmp_path / "not.wav").write_bytes(b"RIFF nothing here")
    alone = tmp_path / "alone"
    alone.mkdir()
    for name in ("thinker.gguf", "talker.gguf"):
        (alone / name).symlink_to(tiny.work / name)
    cases = [
        (["chat", "-m", thinker], "give the question: --audio FILE, --text TEXT, or both"),
        (["chat", "-m", thinker, "--text", "hi", "--mode", "say"], "to say a text as written, use ggtts speak"),
        (["chat", "-m", thinker, "--audio", str(tmp_path / "none.wav")], "none.wav: no such file"),
        (["chat", "-m", thinker, "--text", "hi", "-o", str(tmp_path / "x.txt")], ".txt"),
        (["chat", "-m", str(tiny.work / "talker.gguf"), "--text", "hi"], "talker"),
        (["chat", "-m", thinker, "--audio", str(silent)], "is silent"),
        (["chat", "-m", thinker, "--audio", str(tmp_path / "not.wav")], "not an audio file that can be decoded"),
        (["chat", "-m", str(alone / "thinker.gguf"), "--audio", str(_question_wav(tmp_path / "q.wav"))],
         "needs its audio encoder: put the mmproj GGUF beside it"),
    ]  # fmt: skip
    # beside another 'clip' file (a Qwen3-TTS or vision mmproj) the thinker's own is found, as the loader finds it
    both = tmp_path / "both"
    both.mkdir()
    for name in ("thinker.gguf", "talker.gguf", "mmproj.gguf"):
        (both / name).symlink_to(tiny.work / name)
    from ggtts.families.qwen3omni import is_audio_mmproj
    from ggtts.gguf import GGUFFile
    from ggtts.gguf.write import ModelWriter

    other = ModelWriter(both / "mmproj-other.gguf", "clip")
    other.meta.add_bool("clip.has_vision_encoder", True)
    other.add_tensor("v.blk.0.attn_q.weight", torch.ones(32, 32))
    other.write()
    assert not is_audio_mmproj(GGUFFile(both / "mmproj-other.gguf"))
    question = str(tmp_path / "q.wav")
    cases.append((["chat", "-m", str(both / "thinker.gguf"), "--audio", question], "the model was loaded"))
    for argv, message in cases:
        err = io.StringIO()
        with redirect_stderr(err):
            status = main(argv)
        assert status != 0 and message in err.getvalue(), (argv, err.getvalue())


def test_chat_prompt_is_qwens_template_as_the_tokenizer_reads_it(tiny: Tiny) -> None:
    from tokenizers import Tokenizer

    hf = Tokenizer.from_file(str(tiny.work / "checkpoint" / "tokenizer.json"))
    text = f"<|im_start|>user\n{TEXT}<|im_end|>\n<|im_start|>assistant\n"
    assert _prompt(tiny.tts) == hf.encode(text).ids
    from ggtts.families.qwen3omni.prompt import chat_prompt

    with_system = chat_prompt(lambda s: tiny.tts.tokenizer.encode(s), tiny.tts.talker.cfg, "Hi", system="Be brief.")
    expected = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    assert with_system == hf.encode(expected).ids
    span = tiny.tts.audio_ids().span(3)
    with_audio = chat_prompt(lambda s: tiny.tts.tokenizer.encode(s), tiny.tts.talker.cfg, "Hi", audio=span)
    audio = "<|audio_start|>" + "<|audio_pad|>" * 3 + "<|audio_end|>"
    assert with_audio == hf.encode(f"<|im_start|>user\n{audio}Hi<|im_end|>\n<|im_start|>assistant\n").ids


class FixedDraw:
    """A deterministic stand-in for ``torch.multinomial`` (the inverse CDF at a fixed sequence of points), used
    by both sides so that sampled generations can be compared draw for draw."""

    def __init__(self) -> None:
        self.n = 0

    def point(self) -> float:
        self.n += 1
        return math.modf(self.n * 0.6180339887)[0]

    def __call__(self, probs: torch.Tensor, *_args: Any, **_kwargs: Any) -> Any:
        return self.at(probs)[0]

    def at(self, probs: torch.Tensor) -> tuple[int, Callable[[int], float]]:
        """The index drawn, and how far (in probability) the draw's point lies from any other index's interval."""
        cdf = probs.double().reshape(-1).cumsum(-1)
        x = self.point() * float(cdf[-1])
        index = min(int(torch.searchsorted(cdf, torch.tensor([x], dtype=torch.float64))), probs.shape[-1] - 1)
        return index, draw_margin(cdf, x)


class ForcedDraw:
    """Our sampler's processors and FixedDraw's point, each decision following upstream's (ggtts.measure.forcing):
    a draw whose point lies within a near-tie of upstream's interval counts as upstream's."""

    def __init__(self, forcing: Forcing, params: Any, draw: FixedDraw) -> None:
        from ggtts.families.qwen3omni.generate import HFSampler

        self.forcing, self.sampler, self.draw = forcing, HFSampler(params, False, torch.Generator()), draw

    def __call__(self, logits: torch.Tensor, history: Any = (), suppressed: torch.Tensor | None = None) -> int:
        probs = torch.softmax(self.sampler.scores(logits, history, suppressed), dim=-1)
        return self.forcing.decide(*self.draw.at(probs))


# A sampled decision of ours that differs from upstream's is forgiven where the draw's point lies within this much
# probability of upstream's interval: both sides' probabilities agree to ~1e-7 (float32), so a point that close to a
# boundary may fall on either side of it.
DRAW_TIE = 1e-5


def test_sampled_generation_matches_transformers_draw_for_draw(tiny: Tiny, monkeypatch: pytest.MonkeyPatch) -> None:
    """Sampling as ``generate`` does it (repetition penalty 1.05 over the first codes, suppressed ids, temperature
    0.9, top-k 50 for the talker; top-k 50, top-p 0.8 for the code predictor), with the same draws on both sides;
    ours teacher-forced along upstream's codes."""
    from ggtts.families.qwen3omni.generate import TalkerSampling, generate_frames
    from ggtts.families.qwen3omni.prompt import talker_inputs
    from ggtts.measure.qwen3omni.parity import upstream_generate

    tts, cfg = tiny.tts, tiny.tts.talker.cfg
    prompt = _prompt(tts)
    upstream_draw = FixedDraw()
    real_multinomial = torch.multinomial

    def multinomial(probs: torch.Tensor, num_samples: int, *args: Any, **kwargs: Any) -> torch.Tensor:
        assert num_samples == 1
        return torch.tensor([[upstream_draw(row)] for row in probs.reshape(-1, probs.shape[-1])])

    monkeypatch.setattr(torch, "multinomial", multinomial)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        seen: dict[str, torch.Tensor] = {}
        original = tiny.upstream.code2wav.chunked_decode
        monkeypatch.setattr(tiny.upstream.code2wav, "chunked_decode", lambda c, **k: seen.setdefault("c", c) * 0)
        sequences, _ = tiny.upstream.generate(
            input_ids=torch.tensor([prompt]), return_audio=True, speaker="chelsie", thinker_max_new_tokens=12,
            thinker_do_sample=False, talker_do_sample=True, talker_max_new_tokens=31,
        )  # fmt: skip
        monkeypatch.setattr(tiny.upstream.code2wav, "chunked_decode", original)
    monkeypatch.setattr(torch, "multinomial", real_multinomial)
    reply = sequences[0, len(prompt) :].tolist()
    frames_up = seen["c"].shape[-1]
    assert frames_up >= 20 and upstream_draw.n >= frames_up * cfg.n_codebooks  # it sampled every codebook
    inputs = talker_inputs(tts.talker, tts.embedding, prompt, reply, cfg.speakers["chelsie"])
    params = TalkerSampling(False, cfg.sampling, cfg.cp_sampling, max_frames=30)
    ours_draw = FixedDraw()
    first, rest = frame_forcings(seen["c"], DRAW_TIE)
    pickers = (ForcedDraw(first, cfg.sampling, ours_draw), ForcedDraw(rest, cfg.cp_sampling, ours_draw))
    frames = list(generate_frames(tts.talker, inputs, params, pickers=pickers))
    n, q = len(frames), cfg.n_codebooks
    assert torch.equal(forced_codes(first, rest, n, q), seen["c"])  # every draw upstream's, near-ties aside
    assert len(first.near_ties) + len(rest.near_ties) <= n * q // 4
    # where no EOS came within our 30 frames, upstream drew a 31st first code (its last step) that no frame keeps
    assert ours_draw.n == upstream_draw.n - (1 if n == params.max_frames else 0)
    del upstream_generate


def test_say_mode_speaks_the_text_as_the_reply(tiny: Tiny) -> None:
    """mode="say": the chat as if the thinker had answered the text with itself (its tokens, then <|im_end|>):
    the same codes the talker writes for that reply in mode="chat"'s machinery (audio streamed vs one-shot: float
    rounding apart)."""
    from ggtts.families.qwen3omni.generate import TalkerSampling, generate_frames
    from ggtts.families.qwen3omni.prompt import talker_inputs

    tts, cfg = tiny.tts, tiny.tts.talker.cfg
    reply = [*tts.tokenizer.encode(TEXT, parse_special=False), cfg.im_end]
    inputs = talker_inputs(tts.talker, tts.embedding, _prompt(tts), reply, cfg.speakers["ethan"])
    assert inputs.trailing.shape[1] == len(reply) - 1  # text after the first token, then tts_eos; no <|im_end|>
    frames = list(generate_frames(tts.talker, inputs, TalkerSampling(True, cfg.sampling, cfg.cp_sampling, 20)))
    codes = torch.tensor(frames, dtype=torch.long).T.unsqueeze(0)
    audio = tts.synthesize(TEXT, voice="ethan", temperature=0, max_frames=20)
    torch.testing.assert_close(torch.from_numpy(audio.samples), tts.code2wav(codes)[0, 0], rtol=0, atol=1e-9)


def test_code2wav_pushes_over_fixed_tensors_give_the_ordinary_streams_audio(tiny: Tiny) -> None:
    """With code2wav's pushes over fixed tensors (a GPU's graphs: the first frame alone, then pushes of 4 and of
    ``chunk_frames`` made of fixed sizes; here eagerly), a streamed utterance's chunks are those of ordinary
    streams, up to rounding (measured 2.3e-7 of the peak)."""
    from ggtts.families.qwen3omni.pipeline import DECODER_GRAPH_FRAMES

    tts = tiny.tts
    plain = list(tts.stream(TEXT, voice="ethan", temperature=0, max_frames=30, chunk_frames=7))
    tts.code2wav.use_static_streams(tts.code2wav.cfg.num_quantizers, DECODER_GRAPH_FRAMES, capture=False)
    try:
        chunks = list(tts.stream(TEXT, voice="ethan", temperature=0, max_frames=30, chunk_frames=7))
        assert tts.code2wav.static is not None and list(tts.code2wav.static.lanes) == [1]
    finally:
        del tts.code2wav.static  # (the module's other tests: ordinary streams)
    assert [len(c.samples) for c in chunks] == [len(c.samples) for c in plain] and len(chunks) > 3
    got, want = (torch.from_numpy(np.concatenate([c.samples for c in x])) for x in (chunks, plain))
    print(f"code2wav static against ordinary streams: {_relative(got, want):.1e}")
    assert _relative(got, want) < 1e-5


def test_stream_joins_to_synthesize_and_the_first_chunk_is_one_frame(tiny: Tiny) -> None:
    tts = tiny.tts
    chunks = list(tts.stream(TEXT, voice="chelsie", seed=1, max_frames=30, chunk_frames=4))
    whole = tts.synthesize(TEXT, voice="chelsie", seed=1, max_frames=30, chunk_frames=4)
    assert np.array_equal(np.concatenate([c.samples for c in chunks]), whole.samples)
    hop, lag = tts.code2wav.cfg.total_upsample, tts.code2wav.cfg.trailing_lag
    assert len(chunks[0].samples) == hop - lag  # the first frame goes out alone
    assert all(len(c.samples) <= 4 * hop for c in chunks[1:])
    assert chunks[1].offset == pytest.approx(chunks[0].duration)
    again = tts.synthesize(TEXT, voice="chelsie", seed=1, max_frames=30, chunk_frames=4)
    other = tts.synthesize(TEXT, voice="chelsie", seed=2, max_frames=30, chunk_frames=4)
    assert np.array_equal(again.samples, whole.samples) and not np.array_equal(other.samples, whole.samples)


def test_parallel_streams_say_what_each_says_alone(tiny: Tiny) -> None:
    """``parallel=2``: two streams asked at once share each step of the mixture-of-experts talker and of the code
    predictor (one ggml graph each, every row computed as alone), and say byte for byte what each says alone; a
    chat's speech goes through the lanes too."""
    from ggtts.api import load

    together = load(tiny.work / "thinker.gguf", parallel=2)
    assert together.lanes is not None and together.parallel_streams == 2
    together.lanes.lanes.prefill_chunk = 1 << 20  # prompts whole, as alone (in chunks: other arithmetic)
    asks = [{"voice": "chelsie", "seed": 1, "max_frames": 30, "chunk_frames": 4},
            {"voice": "ethan", "seed": 2, "max_frames": 24, "chunk_frames": 4}]  # fmt: skip
    texts = (TEXT, "A second and longer sentence, to say beside the first.")
    try:
        alone = [np.concatenate([c.samples for c in tiny.tts.stream(t, **a)]) for t, a in zip(texts, asks, strict=True)]
        with together.lanes._cond:  # both join before the loop's next step
            streams = [together.stream(t, **a) for t, a in zip(texts, asks, strict=True)]
        got = [np.concatenate([c.samples for c in s]) for s in streams]
        assert together.lanes.most_lanes == 2
        for a, g in zip(alone, got, strict=True):
            assert len(a) > 0
            np.testing.assert_array_equal(g, a)
        reply = together.chat(TEXT, voice="ethan", seed=3, max_frames=12, max_reply_tokens=6)
        heard = np.concatenate([c.samples for c in reply.audio])
        alone_reply = tiny.tts.chat(TEXT, voice="ethan", seed=3, max_frames=12, max_reply_tokens=6)
        np.testing.assert_array_equal(heard, np.concatenate([c.samples for c in alone_reply.audio]))
        assert together.lanes.steps > 0 and together.lanes._jobs == []
    finally:
        together.lanes.close()


def test_voices_are_the_talkers_speakers(tiny: Tiny) -> None:
    from ggtts.families import family_named
    from ggtts.gguf import GGUFFile

    tts = tiny.tts
    assert sorted(tts.voices) == ["chelsie", "ethan"] and tts.default_voice == "ethan"
    assert sorted(family_named("qwen3omni").voices(GGUFFile(tiny.work / "thinker.gguf"))) == ["chelsie", "ethan"]
    a = tts.synthesize(TEXT, voice="Ethan", temperature=0, max_frames=6)
    b = tts.synthesize(TEXT, voice="ethan", temperature=0, max_frames=6)
    assert np.array_equal(a.samples, b.samples)  # transformers looks speakers up in lower case


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"text": ""}, "empty"),
        ({"text": "?!"}, "nothing to say"),
        ({"voice": "nobody"}, "nobody"),
        ({"mode": "sing"}, "mode must be one of say, chat"),
        ({"temperature": -1}, "temperature"),
        ({"top_p": 1.5}, "top_p"),
        ({"max_frames": 0}, "max_frames"),
        ({"speed": 1.5}, "speed"),
        ({"cfg_scale": 2.0}, "cfg_scale"),
        ({"top_p": 0.0}, "top_p must be above 0"),
        ({"temperature": 1e-40}, "temperature must be 0 \\(greedy\\) or at least"),
        ({"system": "Be brief."}, "applies to mode=chat only"),
        ({"max_reply_tokens": 12}, "max_reply_tokens= bounds the thinker's reply: it applies to mode=chat only"),
        ({"system": 5, "mode": "chat"}, "system must be text"),
        ({"voice": 3}, "voice must be a voice's name, got 3"),
        ({"talker": 5}, "talker must be a file's path, got 5"),
        ({"talker": "/elsewhere/talker.gguf"}, "differs from the one loaded"),
    ],
)
def test_bad_requests_get_one_clear_error(tiny: Tiny, kwargs: dict[str, Any], message: str) -> None:
    from ggtts.errors import InputError

    args = {"text": TEXT, **kwargs}
    with pytest.raises(InputError, match=message):
        list(tiny.tts.stream(args.pop("text"), **args))


def test_files_that_do_not_pair_are_refused(tiny: Tiny, tmp_path: Path) -> None:
    import shutil

    from ggtts.api import load
    from ggtts.errors import GGTTSError

    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(tiny.work / "thinker.gguf", alone / "thinker.gguf")
    with pytest.raises(GGTTSError, match="talker"):
        load(alone / "thinker.gguf")
    with pytest.raises(GGTTSError, match="qwen3omni-talker"):
        load(alone / "thinker.gguf", talker=str(alone / "thinker.gguf"))
    tts = load(alone / "thinker.gguf", talker=str(tiny.work / "talker.gguf"))
    assert tts.voices == tiny.tts.voices


def test_the_talker_file_carries_the_checkpoint_settings(tiny: Tiny) -> None:
    from ggtts.gguf import GGUFFile
    from ggtts.gguf.keys import Qwen3OmniTalker as K

    g = GGUFFile(tiny.work / "talker.gguf")
    cfg = json.loads((tiny.work / "checkpoint" / "config.json").read_text())
    talker = cfg["talker_config"]
    assert g.get(K.CODEC_EOS_ID) == talker["codec_eos_token_id"]
    assert g.get(K.TTS_PAD_ID) == cfg["tts_pad_token_id"] and g.get(K.ASSISTANT_ID) == cfg["assistant_token_id"]
    assert dict(zip(g.get_list(K.SPEAKER_NAMES), g.get_list(K.SPEAKER_IDS), strict=True)) == talker["speaker_id"]
    assert g.get(K.NUM_CODEBOOKS) == talker["num_code_groups"]
    assert g.get(K.TOP_K) == 50 and g.get(K.REPETITION_PENALTY) == pytest.approx(1.05)
    assert g.info("blk.0.ffn_gate_exps.weight").shape == (4, 24, 32)  # (experts, ff, dim) as llama.cpp stacks them
    assert "cp.output.2.weight" in g and "cp.blk.1.attn_q_norm.weight" in g and "c2w.code_embedding.weight" in g


def test_q8_0_talker_runs_quantized_and_stays_close(tiny: Tiny, tmp_path: Path) -> None:
    from ggtts.convert.hf_checkpoint import HFCheckpoint
    from ggtts.convert.qwen3omni_talker import write_talker
    from ggtts.families.qwen3omni.prompt import talker_inputs
    from ggtts.gguf import GGUFFile
    from ggtts.models.qwen3omni_talker.model import Talker
    from ggtts.ops.ggml_kernels import unavailable_reason

    ckpt = HFCheckpoint([tiny.work / "checkpoint"], "tiny")
    path = write_talker(tmp_path / "talker-q8_0.gguf", ckpt.config, ckpt.tensors, "q8_0")
    assert GGUFFile(path).info("blk.0.ffn_up_exps.weight").type.name == "Q8_0"
    q8 = Talker.from_gguf(GGUFFile(path))
    assert (q8.weights_note is None) == (unavailable_reason() is None)
    cfg = tiny.tts.talker.cfg
    reply = [*tiny.tts.tokenizer.encode(TEXT, parse_special=False), cfg.im_end]
    inputs = talker_inputs(tiny.tts.talker, tiny.tts.embedding, _prompt(tiny.tts), reply, cfg.speakers["ethan"])
    with torch.inference_mode():
        _, ref = tiny.tts.talker.step(inputs.prefill, tiny.tts.talker.new_cache(inputs.prefill.shape[1]))
        _, got = q8.step(inputs.prefill, q8.new_cache(inputs.prefill.shape[1]))
    rel = float((got - ref).abs().max() / ref.abs().max())
    assert 0 < rel < 0.05, rel  # quantized (not identical), and close


def test_a_gpu_keeps_a_q8_0_talker_as_stored(tiny: Tiny, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Off the CPU the Q8_0 talker's linear layers, embeddings and expert stacks stay as stored and are widened per
    product (run here through the GPU's plan): the file widened at load gives the same hidden states and logits,
    over a prompt and through the static one-row steps a GPU captures, and the talker holds the file's bytes."""
    from ggtts.convert.hf_checkpoint import HFCheckpoint
    from ggtts.convert.qwen3omni_talker import write_talker
    from ggtts.gguf import GGUFFile
    from ggtts.models.layers import qwen3
    from ggtts.models.qwen3omni_talker.model import Talker
    from ggtts.ops.device_weights import DeviceStoredExperts, DeviceStoredLinear
    from ggtts.ops.stored_weights import stored_weights_plan

    ckpt = HFCheckpoint([tiny.work / "checkpoint"], "tiny")
    path = write_talker(tmp_path / "talker-q8_0.gguf", ckpt.config, ckpt.tensors, "q8_0")
    gpu = dataclasses.replace(stored_weights_plan("cuda"), device="cpu")  # the GPU's plan, kept on the CPU here
    monkeypatch.setattr(qwen3, "stored_weights_plan", lambda device, requested=True: gpu)
    kept = Talker.from_gguf(GGUFFile(path), graph=False, step_graphs=False, max_len=256)
    monkeypatch.undo()
    wide = Talker.from_gguf(GGUFFile(path), graph=False, step_graphs=False, stored_weights=False, max_len=256)
    assert isinstance(kept.blk[0].ffn.ffn_up_exps, DeviceStoredExperts)
    assert isinstance(kept.blk[0].attn.attn_q, DeviceStoredLinear)
    for model in (kept, wide):
        # one-row steps as a GPU runs them (experts gathered), each projection its own product as the kept ones
        model.use_static_steps(capture=False, fuse=False)
    x = torch.randn(1, 9, kept.cfg.talker.dim, generator=torch.Generator().manual_seed(3))
    with torch.inference_mode():
        a, b = kept.new_cache(32), wide.new_cache(32)
        for got, want in zip(kept.step(x[:, :8], a), wide.step(x[:, :8], b), strict=True):  # the prompt
            assert torch.equal(got, want)
        for got, want in zip(kept.step(x[:, 8:], a), wide.step(x[:, 8:], b), strict=True):  # a static step
            assert torch.equal(got, want)
    talker_bytes = sum(i.n_bytes for i in GGUFFile(path).infos() if not i.name.startswith("c2w."))
    held = [t for n, t in [*kept.named_parameters(), *kept.named_buffers()] if "rope." not in n]
    assert sum(t.numel() * t.element_size() for t in held) == talker_bytes


def test_cli_speaks_and_decodes_codes(tiny: Tiny, tmp_path: Path) -> None:
    out = tmp_path / "hello.wav"
    cmd = [sys.executable, "-m", "ggtts.cli", "speak", "-m", str(tiny.work / "thinker.gguf"), "-v", "chelsie"]
    run = subprocess.run([*cmd, "--seed", "1", "-o", str(out), TEXT], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert out.stat().st_size > 44
    codes = tmp_path / "codes.txt"
    codes.write_text("1 2 3 4\n5 6 7 8\n63 0 0 63\n")
    dec = tmp_path / "dec.wav"
    decode = [sys.executable, "-m", "ggtts.cli", "decode", "--vocoder", str(tiny.work / "talker.gguf")]
    run = subprocess.run([*decode, str(codes), "-o", str(dec)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    import soundfile

    audio, rate = soundfile.read(dec)
    assert rate == 24000 and len(audio) == tiny.tts.code2wav.cfg.output_length(3)
    codes.write_text("1 2 3\n")
    run = subprocess.run([*decode, str(codes), "-o", str(dec)], capture_output=True, text=True, timeout=300)
    assert run.returncode != 0 and "frame 1 has 3 codes" in run.stderr and "Traceback" not in run.stderr
    codes.write_text("1 2 3 64\n")
    run = subprocess.run([*decode, str(codes), "-o", str(dec)], capture_output=True, text=True, timeout=300)
    assert run.returncode != 0 and "64" in run.stderr and "Traceback" not in run.stderr


def test_bfloat16_code2wav_where_native_else_one_clear_error(tiny: Tiny) -> None:
    from ggtts.api import load
    from ggtts.errors import InputError
    from ggtts.ops.precision import bfloat16_supported

    path = tiny.work / "thinker.gguf"
    with pytest.raises(InputError, match="unknown precision 'float8'"):
        load(path, precision="float8")
    if not bfloat16_supported():
        with pytest.raises(InputError, match="no native bfloat16"):
            load(path, precision="bfloat16")
        return
    bf16 = load(path, precision="bfloat16")
    codes = torch.randint(0, 64, (1, 4, 30), generator=torch.Generator().manual_seed(7))
    want, got = tiny.tts.code2wav(codes), bf16.code2wav(codes)
    rel = float((got - want).norm() / want.norm())
    assert 0 < rel < 0.05, rel  # bfloat16 arithmetic: close, not equal
    assert bf16.code2wav.decoder[-1].conv._copies()[0].dtype == torch.float32  # the output convolution stays float32


def test_the_sampler_processes_logits_as_transformers_processors_do() -> None:
    """Table test of the talker's sampler against transformers' own processors, in generate's order, on sharp
    logits with a history (so the repetition penalty matters): the scores the draw reads are the same."""
    from transformers.generation.logits_process import (
        LogitsProcessorList,
        RepetitionPenaltyLogitsProcessor,
        SuppressTokensLogitsProcessor,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    from ggtts.families.qwen3omni.generate import HFSampler
    from ggtts.models.qwen3omni_talker.config import Sampling

    g = torch.Generator().manual_seed(0)
    vocab, suppressed = 300, list(range(250, 300))
    for params, history in [
        (Sampling(0.9, 50, 1.0, 1.05), [3, 7, 7, 12, 40]),
        (Sampling(1.0, 50, 0.8, 1.0), []),
        (Sampling(0.7, 5, 0.5, 1.3), [1, 2, 3, 4, 5, 6]),
    ]:
        logits = torch.randn(vocab, generator=g) * 4
        logits[history[:2]] = torch.tensor([6.0, -6.0])[: len(history[:2])]  # a positive and a negative one
        processors = LogitsProcessorList(
            [
                RepetitionPenaltyLogitsProcessor(params.repetition_penalty),
                SuppressTokensLogitsProcessor(suppressed),
                TemperatureLogitsWarper(params.temperature),
                TopKLogitsWarper(params.top_k),
                TopPLogitsWarper(params.top_p),
            ]
        )
        want = processors(torch.tensor([history], dtype=torch.long).reshape(1, -1), logits[None].clone())[0]
        got = HFSampler(params, False, g).scores(logits, history, torch.tensor(suppressed))
        assert torch.equal(torch.isinf(got), torch.isinf(want))
        torch.testing.assert_close(got[~torch.isinf(got)], want[~torch.isinf(want)], rtol=1e-6, atol=1e-6)
        ids = torch.tensor([history], dtype=torch.long).reshape(1, -1)
        penalized = LogitsProcessorList(processors[:2])(ids, logits[None].clone())[0]
        assert HFSampler(params, True, g)(logits, history, torch.tensor(suppressed)) == int(penalized.argmax())


def test_decode_refuses_codes_that_are_not_whole_numbers_in_range(tiny: Tiny) -> None:
    from ggtts.errors import InputError
    from ggtts.families.qwen3omni.decode import decode_codes_cli

    vocoder = tiny.work / "talker.gguf"
    for codes, message in [
        ("[[1.9, 1, 2, 3]]", "holds 1.9, not a whole number"),
        ("[[true, 1, 2, 3]]", "holds True"),
        ("1 2 3 99999999999999999999999", "out of range"),
        ("[]", "no audio codes"),
        ("[[1, 2, 3]]", "frame 1 has 3 codes"),
    ]:
        with pytest.raises(InputError, match=message):
            decode_codes_cli(vocoder, codes)
    with pytest.raises(InputError, match="frame 2 has 2 codes"):
        decode_codes_cli(vocoder, [[1, 2, 3, 4], [1, 2]])
    audio = decode_codes_cli(vocoder, [[1, 2, 3, 4], [5, 6, 7, 8]])
    assert len(audio.samples) == tiny.tts.code2wav.cfg.output_length(2)


def test_decode_of_many_frames_goes_through_the_stream(tiny: Tiny, monkeypatch: pytest.MonkeyPatch) -> None:
    """More frames than a push go through code2wav's stream (memory bounded by a push), the one-shot samples."""
    from ggtts.families.qwen3omni import decode

    frames = torch.randint(0, 32, (11, 4), generator=torch.Generator().manual_seed(7)).tolist()
    whole = decode.decode_codes_cli(tiny.work / "talker.gguf", frames).samples
    monkeypatch.setattr(decode, "DECODE_PUSH", 3)
    pushed = decode.decode_codes_cli(tiny.work / "talker.gguf", frames).samples
    assert pushed.shape == whole.shape == (tiny.tts.code2wav.cfg.output_length(11),)
    assert float(np.abs(pushed - whole).max()) <= 2e-5 and not np.array_equal(pushed, np.zeros_like(pushed))


def test_cli_takes_a_talker_from_another_folder(tiny: Tiny, tmp_path: Path) -> None:
    import shutil

    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(tiny.work / "thinker.gguf", alone / "thinker.gguf")
    out = tmp_path / "out.wav"
    cmd = [sys.executable, "-m", "ggtts.cli", "speak", "-m", str(alone / "thinker.gguf"), "--talker"]
    run = subprocess.run(
        [*cmd, str(tiny.work / "talker.gguf"), "-o", str(out), TEXT], capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr
    assert out.stat().st_size > 44


def test_info_names_the_talker_a_companion_and_the_thinker_its_voices(
    tiny: Tiny, capsys: pytest.CaptureFixture[str]
) -> None:
    from ggtts.cli import main

    assert main(["info", str(tiny.work / "talker.gguf")]) == 0
    assert "(a companion file of qwen3omni: talker GGUF" in capsys.readouterr().out
    assert main(["info", str(tiny.work / "mmproj.gguf")]) == 0
    assert "(a companion file of qwen3omni: audio encoder GGUF" in capsys.readouterr().out
    assert main(["info", str(tiny.work / "thinker.gguf")]) == 0
    out = capsys.readouterr().out
    assert "family: qwen3omni" in out and "voices (2): chelsie, ethan" in out


def test_the_talker_converter_refuses_what_it_cannot_write(tiny: Tiny, tmp_path: Path) -> None:
    from ggtts.convert.hf_checkpoint import HFCheckpoint
    from ggtts.convert.qwen3omni_talker import write_talker
    from ggtts.errors import ConversionError

    ckpt = HFCheckpoint([tiny.work / "checkpoint"], "tiny")
    out = tmp_path / "talker.gguf"
    cases: list[tuple[dict[str, Any], Any, str]] = [
        ({**ckpt.config, "model_type": "qwen2"}, ckpt.tensors, "model_type 'qwen2' is not qwen3_omni_moe"),
        ({k: v for k, v in ckpt.config.items() if k != "talker_config"}, ckpt.tensors, "no 'talker_config' section"),
        (
            {**ckpt.config, "talker_config": {**ckpt.config["talker_config"], "speaker_id": {}}},
            ckpt.tensors,
            "the talker has no speakers",
        ),
        (ckpt.config, {k: v for k, v in ckpt.tensors.items() if k != "talker.codec_head.weight"}, "no talker tensors"),
        (
            ckpt.config,
            {k: v for k, v in ckpt.tensors.items() if k != "talker.text_projection.linear_fc1.bias"},
            "missing tensor 'talker.text_projection.linear_fc1.bias'",
        ),
    ]
    for config, tensors, message in cases:
        with pytest.raises(ConversionError, match=re.escape(message)):
            write_talker(out, config, tensors, "f32")
        assert not out.exists() and not list(tmp_path.iterdir())  # nothing half-written left behind


def test_files_that_do_not_match_are_refused_at_load(
    tiny: Tiny, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ggtts.api import load
    from ggtts.convert import qwen3omni_talker
    from ggtts.convert.hf_checkpoint import HFCheckpoint
    from ggtts.errors import GGTTSError, GGUFError

    thinker = tiny.work / "thinker.gguf"
    with pytest.raises(
        GGTTSError, match="qwen3omni has no load option 'codec'; it takes device, lexicon, precision, parallel, talker"
    ):
        load(thinker, codec="x.gguf")
    ckpt = HFCheckpoint([tiny.work / "checkpoint"], "tiny")
    talker_cfg = {**ckpt.config["talker_config"], "thinker_hidden_size": 64}  # a talker for a 64-wide thinker
    tensors = dict(ckpt.tensors)
    for proj in ("text_projection", "hidden_projection"):
        tensors[f"talker.{proj}.linear_fc1.weight"] = torch.zeros(48, 64)
    wide = qwen3omni_talker.write_talker(tmp_path / "wide.gguf", {**ckpt.config, "talker_config": talker_cfg},
                                         tensors, "f32")  # fmt: skip
    with pytest.raises(GGUFError, match="takes 64-wide thinker states"):
        load(thinker, talker=str(wide))
    monkeypatch.setattr(qwen3omni_talker, "SUPPRESSED_TAIL", 16)  # the talker could draw codes past the codebook
    tail = qwen3omni_talker.write_talker(tmp_path / "tail.gguf", ckpt.config, ckpt.tensors, "f32")
    with pytest.raises(GGUFError, match="not a matching talker and code2wav"):
        load(thinker, talker=str(tail))


def test_an_empty_chat_answer_is_named(tiny: Tiny, monkeypatch: pytest.MonkeyPatch) -> None:
    from ggtts.errors import InputError

    thinker = tiny.tts._load_thinker()
    monkeypatch.setattr(
        thinker, "greedy", lambda prompt, limit, eos_ids, before_step=None: [tiny.tts.talker.cfg.im_end]
    )
    with pytest.raises(InputError, match="the thinker's answer is empty"):
        tiny.tts.synthesize(TEXT, mode="chat")


class _Recorder:
    """A pick that keeps the logits it is shown and answers the given codes in turn."""

    def __init__(self, codes: list[int]) -> None:
        self.codes, self.seen = iter(codes), list[torch.Tensor]()

    def __call__(self, logits: torch.Tensor, history: Any = (), suppressed: Any = None) -> int:
        self.seen.append(logits.detach().float().clone())
        return next(self.codes)


@pytest.mark.parametrize(("kind", "renormalized"), [("f32", False), ("f32", True), ("q8_0", False)])
def test_the_ggml_graph_steps_give_the_torch_modules_logits(
    tiny: Tiny, tmp_path: Path, kind: str, renormalized: bool
) -> None:
    """On the CPU each step of the talker (attention and a mixture of experts with a shared expert) and of the code
    predictor is one ggml graph; the torch modules op by op (:meth:`TalkerStack.modules_only`) give the same
    logits at every decision, teacher-forced along the modules' own greedy frames. Measured: f32 ~2e-7 of the
    logits' peak; Q8_0 identical (the 7e-7 does not move a Q8_0 activation here). ``renormalized``: the picked
    experts' weights over their sum (``norm_topk_prob``, off in this checkpoint), set on both paths."""
    from ggtts.convert.hf_checkpoint import HFCheckpoint
    from ggtts.convert.qwen3omni_talker import write_talker
    from ggtts.families.qwen3omni.generate import TalkerSampling, generate_frames
    from ggtts.families.qwen3omni.prompt import talker_inputs
    from ggtts.gguf import GGUFFile
    from ggtts.models.qwen3omni_talker.model import Talker

    path = tiny.tts.talker_path
    if kind != "f32":
        ckpt = HFCheckpoint([tiny.work / "checkpoint"], "tiny")
        path = write_talker(tmp_path / f"talker-{kind}.gguf", ckpt.config, ckpt.tensors, kind)
    talker = Talker.from_gguf(GGUFFile(path), max_len=512)
    assert talker.graph is not None and talker.cp.graph is not None
    talker.cfg = dataclasses.replace(talker.cfg, codec_eos=-1)  # no end: every frame drawn
    for block in talker.blk:
        block.ffn.norm_topk_prob = renormalized  # read by the modules' router and by the graph as it is built
    cfg = talker.cfg
    reply = [*tiny.tts.tokenizer.encode(TEXT, parse_special=False), cfg.im_end]
    inputs = talker_inputs(talker, tiny.tts.embedding, _prompt(tiny.tts), reply, cfg.speakers["ethan"])
    params = TalkerSampling(True, cfg.sampling, cfg.cp_sampling, max_frames=16)
    with talker.modules_only():
        frames = list(generate_frames(talker, inputs, params))
    logits = []
    for modules in (True, False):
        first, rest = _Recorder([f[0] for f in frames]), _Recorder([c for f in frames for c in f[1:]])
        with talker.modules_only() if modules else contextlib.nullcontext():
            assert list(generate_frames(talker, inputs, params, pickers=(first, rest))) == frames
        logits.append((torch.stack(first.seen), torch.stack(rest.seen)))
    (want_first, want_rest), (got_first, got_rest) = logits
    errors = _relative(got_first, want_first), _relative(got_rest, want_rest)
    print(f"{kind} (renormalized {renormalized}): talker {errors[0]:.1e}, code predictor {errors[1]:.1e}")
    assert max(errors) < (1e-5 if kind == "f32" else 5e-3)


def test_the_steps_cuda_graphs_hold_match_the_eager_steps(tiny: Tiny) -> None:
    """What runs as CUDA graphs on a GPU, run eagerly here: the talker's one-row step over a fixed cache (position
    read from a tensor, the whole cache attended under a mask, the experts' weights gathered) gives the eager step's
    hidden states and logits, teacher-forced frame by frame; the code predictor's frame with its codes chosen as
    tensors (:class:`GraphedFrame`) gives the host loop's codes and embedding sum exactly (the same arithmetic)."""
    from ggtts.families.qwen3omni.generate import GraphedFrame, HFSampler, HostFrames, TalkerDecoder
    from ggtts.families.qwen3omni.prompt import talker_inputs
    from ggtts.gguf import GGUFFile
    from ggtts.models.qwen3omni_talker.model import Talker

    tts, cfg = tiny.tts, tiny.tts.talker.cfg
    reply = [*tts.tokenizer.encode(TEXT, parse_special=False), cfg.im_end]
    inputs = talker_inputs(tts.talker, tts.embedding, _prompt(tts), reply, cfg.speakers["ethan"])
    # float experts, as on a GPU (stored ones are ggml's, CPU only)
    eager = Talker.from_gguf(GGUFFile(tts.talker_path), stored_weights=False, max_len=512)
    static = Talker.from_gguf(GGUFFile(tts.talker_path), stored_weights=False, max_len=512)
    static.use_static_steps(capture=False)
    eager.cfg = dataclasses.replace(eager.cfg, codec_eos=-1)  # no end: every frame drawn
    greedy = HFSampler(cfg.sampling, True, torch.Generator())
    rest = HFSampler(cfg.cp_sampling, True, torch.Generator())
    frames = 16
    with torch.inference_mode():
        a = TalkerDecoder(eager, inputs, frames, greedy, HostFrames(eager.cp, rest))
        b = TalkerDecoder(static, inputs, frames, greedy, HostFrames(static.cp, rest))
        assert static.static is not None and list(static.static.decoders) == [256]
        a.prefill()
        b.prefill()
        worst = 0.0
        for step in range(frames):
            worst = max(worst, _relative(b.logits, a.logits), _relative(b.hidden, a.hidden))
            frame = a.draw(step)
            assert frame is not None
            b.next_input = a.next_input  # teacher-forced: both step on the eager run's input
            a.feed(frame)
            b.feed(frame)
        assert b.cache.length == a.cache.length == inputs.prefill.shape[1] + frames
        assert worst < 1e-5, worst  # the first: the prompt padded and prefilled as one graph, as on a GPU
        assert list(static.static.decoders[256].prefills) == [16, 32, 64]  # made at the first prompt

        graphed = GraphedFrame(eager.cp, cfg.cp_sampling, greedy=True, seed=0, capture=False)
        fused = GraphedFrame(static.cp, cfg.cp_sampling, greedy=True, seed=0, capture=False)  # as on a GPU
        host = HostFrames(eager.cp, rest)
        g = torch.Generator().manual_seed(5)
        for _ in range(4):
            hidden, first = (torch.randn(1, 1, cfg.talker.dim, generator=g) for _ in range(2))
            codes, total = graphed(hidden, first)
            want_codes, want_total = host(hidden, first)
            assert codes == want_codes and torch.equal(total, want_total)
            codes, total = fused(hidden, first)  # the same codes: the same tables summed
            assert codes == want_codes and torch.equal(total, want_total)


def test_the_fused_gpu_steps_launch_fewer_and_larger_products(tiny: Tiny) -> None:
    """What a GPU replays per frame (the talker's static step and the code predictor's graphed frame), counted
    here op by op, with the projections fused (``use_static_steps``' default) and each its own: each talker layer
    runs 6 matrix products fewer (queries/keys/values 3 -> 1, the router with the shared expert's gate 2 -> 1, the
    shared expert's gate and up 2 -> 1, the experts' gathers and products for gate and up 4 -> 2), each code-predictor
    layer step 3 fewer (queries/keys/values, gate and up), and the query and key heads rotate together."""
    from ggtts.families.qwen3omni.generate import GraphedFrame
    from ggtts.gguf import GGUFFile
    from ggtts.measure.operations import Operations
    from ggtts.models.qwen3omni_talker.model import Talker

    tts, cfg = tiny.tts, tiny.tts.talker.cfg
    counts = []
    for fuse in (False, True):
        talker = Talker.from_gguf(GGUFFile(tts.talker_path), stored_weights=False, max_len=64, graph=False)
        talker.use_static_steps(capture=False, fuse=fuse)
        frame = GraphedFrame(talker.cp, cfg.cp_sampling, greedy=False, seed=0, capture=False)
        x = torch.randn(1, 1, cfg.talker.dim, generator=torch.Generator().manual_seed(9))
        with torch.inference_mode():
            cache = talker.new_cache(8)
            talker.step(x, cache)  # the first step makes its decoder
            with Operations() as ops:
                hidden, _ = talker.step(x, cache)
                frame(hidden, x)
        counts.append(ops)
    plain, fused = counts
    print(f"operations per frame {plain.total} -> {fused.total}, products {plain.products} -> {fused.products}")
    layer_steps = cfg.code_predictor.n_layers * (cfg.n_codebooks - 1)
    assert plain.products - fused.products == 6 * cfg.talker.n_layers + 3 * layer_steps
    assert fused.counts["roll"] * 2 == plain.counts["roll"] == 2 * (cfg.talker.n_layers + layer_steps)
    assert fused.total < plain.total


@pytest.mark.parametrize("greedy", [True, False])
def test_the_gpu_steps_trace_whole(tiny: Tiny, greedy: bool) -> None:
    """The talker's static step, its prompt's prefill (every expert through every row, as a GPU runs a prompt of up
    to 64 rows) and the code predictor's graphed frame (fused, as on a GPU) each trace as one graph with no break:
    nothing in them is read on the host (which would wait for the GPU, and which a CUDA graph cannot hold), and
    ``torch.compile`` can fuse each whole."""
    import torch._dynamo as dynamo

    from ggtts.families.qwen3omni.generate import GraphedFrame
    from ggtts.gguf import GGUFFile
    from ggtts.models.qwen3omni_talker.model import Talker
    from ggtts.ops.stored_experts import Experts

    cfg = tiny.tts.talker.cfg
    talker = Talker.from_gguf(GGUFFile(tiny.tts.talker_path), stored_weights=False, max_len=64, graph=False)
    talker.use_static_steps(capture=False)
    for module in talker.modules():
        if isinstance(module, Experts):
            module.dense = True  # what a GPU chooses for a prompt of up to 64 rows
    frame = GraphedFrame(talker.cp, cfg.cp_sampling, greedy, seed=0, capture=False)
    dynamo.reset()
    with torch.inference_mode():
        cache = talker.new_cache(16)
        talker.step(torch.randn(1, 3, cfg.talker.dim), cache)
        step = talker.static.owner(cache) if talker.static is not None else None
        assert step is not None and list(step.prefills) == [16, 32, 64]
        for traced in (step.graph.step, step.prefills[16].graph.step, frame.graph.step):
            explained = dynamo.explain(traced)()
            assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons


def test_a_prompt_prefilled_as_a_graph_is_the_eager_prompt(tiny: Tiny) -> None:
    """A prompt through the prefill's graph (padded to 16, 32 or 64 rows, every expert through every row, as on a
    GPU) against the modules over the prompt alone, at lengths about each size; whatever was left in the padding
    (a NaN here) changes nothing; a prompt past 64 rows runs eagerly."""
    from ggtts.gguf import GGUFFile
    from ggtts.models.qwen3omni_talker.model import Talker
    from ggtts.ops.stored_experts import Experts

    cfg = tiny.tts.talker.cfg
    eager = Talker.from_gguf(GGUFFile(tiny.tts.talker_path), stored_weights=False, max_len=256, graph=False)
    static = Talker.from_gguf(GGUFFile(tiny.tts.talker_path), stored_weights=False, max_len=256, graph=False)
    static.use_static_steps(capture=False)
    for module in [*eager.modules(), *static.modules()]:
        if isinstance(module, Experts):
            module.dense = True  # what a GPU runs for a prompt of up to 64 rows
    g = torch.Generator().manual_seed(4)
    with torch.inference_mode():
        for t in (2, 15, 16, 17, 33, 64, 65):
            x = torch.randn(1, t, cfg.talker.dim, generator=g)
            step = static.static.owner(static.new_cache(100)) if static.static is not None else None
            for prefill in step.prefills.values() if step is not None else ():
                prefill.input.fill_(float("nan"))
            a, b = eager.new_cache(100), static.new_cache(100)
            want, got = eager.step(x, a), static.step(x, b)
            assert a.length == b.length == t
            assert max(_relative(g_, w) for g_, w in zip(got, want, strict=True)) < 1e-5, t
            after = torch.randn(1, 1, cfg.talker.dim, generator=g)  # a step after it: the padding's keys unseen
            assert (
                max(_relative(g_, w) for g_, w in zip(static.step(after, b), eager.step(after, a), strict=True)) < 1e-5
            )
    assert step is not None and sorted(step.prefills) == [16, 32, 64]


@pytest.mark.parametrize("experts", ["every expert", "gathered"])
def test_the_talkers_gpu_lanes_step_each_row_as_its_sequence_steps_alone(
    tiny: Tiny, experts: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The talker's static lanes (``parallel`` on a GPU: every lane's one-row step in one graph over fixed caches;
    each prompt padded and prefilled as one graph into its row), run eagerly, with the rows' experts as a GPU runs
    them: every row through every expert (8 or more lanes at the real shape), or each row's picks gathered (up to 7:
    ``gathers_rows``, forced here, the tiny talker having 4 experts). Three sequences at their own positions, the
    middle one sitting some steps out, each get the eager modules' hidden states and logits over their own
    sequence; the step and the prefill each trace as one graph."""
    import torch._dynamo as dynamo

    from ggtts.gguf import GGUFFile
    from ggtts.models.qwen3omni_talker.model import Talker
    from ggtts.ops import stored_experts
    from ggtts.ops.stored_experts import Experts

    gathered: list[int] = []
    if experts == "gathered":

        def gathers(rows: int, k: int, n_expert: int) -> bool:
            gathered.append(rows)
            return rows <= 3  # the lanes' rows, not the prompts' (16 and more)

        monkeypatch.setattr(stored_experts, "gathers_rows", gathers)

    cfg = tiny.tts.talker.cfg
    eager = Talker.from_gguf(GGUFFile(tiny.tts.talker_path), stored_weights=False, max_len=256, graph=False)
    lanes = Talker.from_gguf(GGUFFile(tiny.tts.talker_path), stored_weights=False, max_len=256, graph=False)
    lanes.use_static_lanes(3, capture=False)
    for module in lanes.modules():
        if isinstance(module, Experts):
            module.dense = True  # what a GPU runs for up to 64 rows: no host wait
    g = torch.Generator().manual_seed(8)
    worst = 0.0
    with torch.inference_mode():
        rows = [lanes.new_cache(40) for _ in range(3)]
        alone = [eager.new_cache(40) for _ in range(3)]
        for t, row, own in zip((4, 7, 2), rows, alone, strict=True):
            x = torch.randn(1, t, cfg.talker.dim, generator=g)
            for bucket in lanes.lanes.buckets.values() if lanes.lanes is not None else ():
                for prefill in bucket.prefills.values():  # whatever the padding held before changes nothing
                    prefill.input.fill_(float("nan"))
            worst = max(worst, *(_relative(a, b) for a, b in zip(lanes.step(x, row), eager.step(x, own), strict=True)))
        for step in range(5):
            taking = [0, 1, 2] if step % 2 else [0, 2]
            xs = [torch.randn(1, 1, cfg.talker.dim, generator=g) for _ in taking]
            for i, x, got in zip(taking, xs, lanes.step_many(xs, [rows[i] for i in taking]), strict=True):
                want = eager.step(x, alone[i])
                worst = max(worst, *(_relative(a, b) for a, b in zip(got, want, strict=True)))
                assert got[1].shape == want[1].shape and rows[i].length == alone[i].length
        assert lanes.lanes is not None
        bucket = next(iter(lanes.lanes.buckets.values()))
        assert sorted(bucket.prefills) == [16, 32, 64]
        for traced in (bucket.graph.step, bucket.prefills[16].graph.step):
            explained = dynamo.explain(traced)()
            assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons
    print(f"talker lanes rows against the modules ({experts}): {worst:.1e}")
    assert worst < 1e-5, worst
    assert (3 in gathered) == (experts == "gathered")


def test_a_prefill_graph_that_fails_is_made_again_and_host_waiting_experts_run_eagerly(
    tiny: Tiny, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The prompt graphs are made all or none: a capture that fails (out of memory, say) leaves none, and the next
    prompt makes them again. Experts told to loop (a host wait per expert, which no graph can hold) keep prompts
    out of the graphs."""
    from ggtts.gguf import GGUFFile
    from ggtts.models.layers import static_steps
    from ggtts.models.qwen3omni_talker.model import Talker
    from ggtts.ops.stored_experts import Experts

    cfg = tiny.tts.talker.cfg
    talker = Talker.from_gguf(GGUFFile(tiny.tts.talker_path), stored_weights=False, max_len=256, graph=False)
    talker.use_static_steps(capture=False)
    x = torch.randn(1, 20, cfg.talker.dim, generator=torch.Generator().manual_seed(6))
    real = static_steps._Prefill.__call__

    def fails_at_32(self: Any, rows: torch.Tensor) -> Any:
        if self.input.shape[1] == 32:
            raise torch.cuda.OutOfMemoryError("no memory for the 32-row graph")
        return real(self, rows)

    with torch.inference_mode():
        monkeypatch.setattr(static_steps._Prefill, "__call__", fails_at_32)
        cache = talker.new_cache(64)
        with pytest.raises(torch.cuda.OutOfMemoryError):
            talker.step(x, cache)
        step = talker.static.owner(cache) if talker.static is not None else None
        assert step is not None and step.prefills == {}
        monkeypatch.undo()
        cache = talker.new_cache(64)
        talker.step(x, cache)
        assert sorted(step.prefills) == [16, 32, 64] and cache.length == 20
        talker.static.decoders.clear()  # a fresh fixed cache: no graphs yet
        next(m for m in talker.modules() if isinstance(m, Experts)).dense = False
        cache = talker.new_cache(64)
        talker.step(x, cache)
        step = talker.static.owner(cache)
        assert step is not None and step.prefills == {} and cache.length == 20


def test_a_talkers_graphed_frame_is_made_once_and_reseeded(tiny: Tiny) -> None:
    """One :class:`GraphedFrame` per talker and sampling setting (a CUDA graph is captured once, not per
    utterance); each utterance's seed restarts its draws."""
    from ggtts.families.qwen3omni.generate import graphed_frame

    talker, cfg = tiny.tts.talker, tiny.tts.talker.cfg
    g = torch.Generator().manual_seed(6)
    hidden, first = (torch.randn(1, 1, cfg.talker.dim, generator=g) for _ in range(2))
    with torch.inference_mode():
        frame = graphed_frame(talker, cfg.cp_sampling, False, 1)
        codes = [frame(hidden, first)[0] for _ in range(3)]
        again = graphed_frame(talker, cfg.cp_sampling, False, 1)
        assert again is frame and [again(hidden, first)[0] for _ in range(3)] == codes
        assert graphed_frame(talker, cfg.cp_sampling, True, 1) is not frame
        other = graphed_frame(talker, cfg.cp_sampling, False, 2)
        assert other is frame and [other(hidden, first)[0] for _ in range(3)] != codes


def test_the_device_pick_draws_from_the_filtered_distribution() -> None:
    """The code predictor's pick on the GPU (the exponential race over temperature, top-k and top-p): its draws
    follow :class:`HFSampler`'s filtered probabilities, and nothing they filter out is ever drawn."""
    from ggtts.families.qwen3omni.generate import DevicePick, HFSampler
    from ggtts.models.qwen3omni_talker.config import Sampling

    params = Sampling(temperature=0.9, top_k=6, top_p=0.8)
    logits = torch.tensor([2.0, 1.7, 1.5, 1.4, 0.9, 0.8, 0.7, -1.0, 3.0, 1.0])
    want = torch.softmax(HFSampler(params, False, torch.Generator()).scores(logits), dim=-1)
    assert 2 < int((want > 0).sum()) < 6  # top-p cut below top-k: both filters matter here
    n = 6000
    noise = torch.empty(n, len(logits)).exponential_(generator=torch.Generator().manual_seed(0))
    pick = DevicePick(params, False, noise)
    counts = torch.bincount(torch.cat([pick(j, logits) for j in range(n)]), minlength=len(logits)).float()
    assert counts[want == 0].sum() == 0
    assert float((counts / n - want).abs().max()) < 0.025  # 4 standard deviations of a frequency at 6000 draws
    assert int(DevicePick(params, True, noise)(0, logits)) == 8


@pytest.mark.parametrize(("top_k", "top_p"), [(50, 0.8), (50, 1.0), (0, 0.8), (3, 0.5), (5000, 0.9)])
def test_the_device_pick_draws_what_the_whole_filtered_race_draws(top_k: int, top_p: float) -> None:
    """The pick races only the top-k tokens (their softmax cut by top-p): for the same noise it draws what the race
    over the whole vocabulary, filtered by :func:`filter_top_k` and :func:`filter_top_p`, draws."""
    from ggtts.families.qwen3omni.generate import DevicePick
    from ggtts.models.qwen3omni_talker.config import Sampling
    from ggtts.runtime.sampling import filter_top_k, filter_top_p

    params = Sampling(temperature=0.9, top_k=top_k, top_p=top_p)
    g = torch.Generator().manual_seed(11)
    logits = torch.randn(200, 2048, generator=g) * 3
    noise = torch.empty(200, 2048).exponential_(generator=g)
    pick = DevicePick(params, False, noise)
    for j in range(200):
        scores = logits[j] / params.temperature
        probs = torch.softmax(filter_top_p(filter_top_k(scores, top_k), top_p), dim=-1)
        assert int(pick(j, logits[j])) == int((probs / noise[j]).argmax())


def test_say_mode_reads_no_markup_and_chat_mode_asks_as_written(tiny: Tiny, monkeypatch: pytest.MonkeyPatch) -> None:
    """mode="say" speaks the text without its Markdown and HTML (``normalization=False``: with them); in
    mode="chat" the text is a question to the thinker, which reads Markdown: it goes as written."""
    tts = tiny.tts
    seen: list[list[str]] = []
    stream = tts._stream
    monkeypatch.setattr(tts, "_stream", lambda chunks, *a: seen.append(list(chunks)) or stream(chunks, *a))
    marked = "**Hello**, <b>world</b>!"
    tts.synthesize(marked, voice="ethan", max_frames=2)
    tts.synthesize(marked, voice="ethan", max_frames=2, normalization=False)
    tts.synthesize(marked, voice="ethan", max_frames=2, mode="chat", max_reply_tokens=2)
    monkeypatch.setattr(tts, "lexicon", Lexicon.of({"world": "planet"}))  # say mode's text, not a question
    tts.synthesize(marked, voice="ethan", max_frames=2)
    tts.synthesize(marked, voice="ethan", max_frames=2, mode="chat", max_reply_tokens=2)
    assert seen == [["Hello, world!"], [marked], [marked], ["Hello, planet!"], [marked]]
