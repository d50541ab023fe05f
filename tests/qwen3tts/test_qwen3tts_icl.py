"""Voice cloning in context (qwen-tts's ICL mode, its default): the speech tokenizer's encoder turns the recording
into codes identical to upstream's (transformers' Mimi, which qwen-tts's encoder is), ``ggtts voice create
--text`` keeps them with the text, and the model speaks with the recording's text and frames ahead of the new text
as qwen-tts's ``generate_voice_clone`` does: the prompt, 40+ greedy frames of every codebook (teacher-forced), and
the audio (upstream decodes the recording's codes and the new ones together and cuts the recording off)."""

from __future__ import annotations

import math
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile
import torch
from _qwen3tts_tiny import Built, clone_generate, forced_greedy, need_qwen_tts

from ggtts.api import load
from ggtts.convert.qwen3tts_hf import convert_qwen3tts, mmproj_path
from ggtts.errors import GGUFError, InputError
from ggtts.families.qwen3tts.prompt import ROLE
from ggtts.families.qwen3tts.voices import create_voice, read_voice
from ggtts.gguf import GGUFFile
from ggtts.gguf.keys import Qwen3TTS as K
from ggtts.gguf.keys import Qwen3TTSVoice as V
from ggtts.measure.qwen3tts.upstream import build_encoder, upstream_encode, voice_like
from ggtts.models.qwen3tts.encoder import SpeechEncoder
from ggtts.models.qwen3tts.speaker import SAMPLE_RATE
from gguf_variant import variant

pytestmark = pytest.mark.needs_reference

REF_TEXT = "Some words, said slowly."
FRAMES = 44


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Built:
    need_qwen_tts()
    built = Built(tmp_path_factory.mktemp("qwen3tts_icl"), "base")
    built.mimi = build_encoder(0)  # type: ignore[attr-defined]  # the checkpoint's encoder (same seed)
    soundfile.write(built.work / "short.wav", voice_like(2.0, 10), SAMPLE_RATE)  # 25 frames: fewer than the text
    soundfile.write(built.work / "long.wav", voice_like(4.3, 7), SAMPLE_RATE)  # 54 frames: more than the text
    create_voice(built.path, built.work / "short.wav", built.work / "sam.gguf", text=REF_TEXT)
    create_voice(built.path, built.work / "long.wav", built.work / "lena.gguf", text=REF_TEXT)
    return built


def _margin(encoder: SpeechEncoder, samples: torch.Tensor) -> float:
    """The smallest gap, relative, between the nearest and the second-nearest codebook entry over every choice."""
    gaps = []
    for distances, _ in encoder.nearest(encoder.latents(samples)):
        two = distances.topk(2, largest=False).values
        gaps.append(float(((two[:, 1] - two[:, 0]) / two[:, 1]).min()))
    return min(gaps)


@pytest.mark.parametrize("seconds", [1.0, 4.3, 12.0])
def test_the_encoder_makes_upstreams_codes(base: Built, seconds: float) -> None:
    """Codes identical to Mimi's (upstream's first 16 codebooks, first ceil(n / 1920) frames), from lengths on and
    off a frame's boundary and past the transformer's window; the quantizer's input within float rounding."""
    encoder = SpeechEncoder.from_gguf(GGUFFile(mmproj_path(base.path)))
    samples = voice_like(seconds, 11)
    x = torch.from_numpy(samples)
    theirs = upstream_encode(base.mimi, samples)  # type: ignore[attr-defined]
    assert theirs.shape == (math.ceil(samples.size / 1920), 16)
    with torch.no_grad():
        latents = base.mimi.encoder(x[None, None]).latents  # type: ignore[attr-defined]
    ours = encoder.latents(x)
    assert float((ours - latents).abs().max()) <= 1e-5 * float(latents.abs().max())
    print(f"{seconds} s: smallest relative gap to a second codebook entry {_margin(encoder, x):.1e}")
    assert torch.equal(encoder.encode(x), theirs)


def test_the_published_and_the_transformers_5_layouts_convert_alike(base: Built, tmp_path: Path) -> None:
    """The published tokenizer names Mimi's parts as transformers 4.57 does; a file saved under transformers 5
    nests them (``encoder.encoder.encoder_seanet.*``): both convert to the same encoder."""
    from safetensors.torch import load_file, save_file

    ckpt = tmp_path / "ckpt"
    shutil.copytree(base.work / "ckpt", ckpt)
    tensors = load_file(str(ckpt / "speech_tokenizer" / "model.safetensors"))
    renamed = {}
    for name, t in tensors.items():
        for old, new in (("encoder.encoder.", "encoder.encoder.encoder_seanet."),
                         ("encoder.encoder_transformer.", "encoder.encoder.encoder_transformer."),
                         ("encoder.downsample.", "encoder.encoder.downsample.")):  # fmt: skip
            if name.startswith(old):
                name = new + name.removeprefix(old)
                break
        renamed[name] = t
    assert renamed.keys() != tensors.keys()
    save_file(renamed, str(ckpt / "speech_tokenizer" / "model.safetensors"))
    path = convert_qwen3tts([ckpt], tmp_path / "t5.gguf", "f32")
    ours, theirs = GGUFFile(mmproj_path(path)), GGUFFile(mmproj_path(base.path))
    names = sorted(n for n in theirs.names() if n.startswith(K.ENC + "."))
    assert names and names == sorted(n for n in ours.names() if n.startswith(K.ENC + "."))
    assert all(torch.equal(ours.tensor(n), theirs.tensor(n)) for n in names)


def test_a_voice_with_its_text_holds_the_recordings_codes(base: Built) -> None:
    voice = read_voice(base.work / "lena.gguf")
    audio, _ = soundfile.read(base.work / "long.wav", dtype="float32")
    assert voice.in_context and voice.text == REF_TEXT and voice.codes is not None
    assert torch.equal(voice.codes, upstream_encode(base.mimi, audio))  # type: ignore[attr-defined]
    theirs = base.upstream.extract_speaker_embedding(audio, SAMPLE_RATE)
    assert float((voice.embedding - theirs).abs().max()) <= 1e-5 * float(theirs.abs().max())


def _icl_generate(built: Built, text: str, voice: Any, frames: int, non_streaming: bool) -> tuple[torch.Tensor, dict]:
    """qwen-tts's greedy voice cloning in ICL mode (its default) with ``voice``'s recording."""
    return clone_generate(built, text, voice.embedding, frames, (voice.text, voice.codes), non_streaming)


@pytest.mark.parametrize(
    ("name", "text"),
    [("sam", "The quick brown fox jumps over the lazy dog, twice."), ("lena", "Hello, world!")],
)
@pytest.mark.parametrize("decoder", ["stream", "static stream"])
def test_in_context_cloning_follows_upstream(base: Built, name: str, text: str, decoder: str) -> None:
    """A recording shorter than the text (its text runs on into the generated frames' inputs) and one longer (its
    frames run on over tts_pad): the prompt, 40+ greedy frames of every codebook, and the audio after the cut; also
    with the decoder's pushes over fixed tensors going on from the primed decoder (a GPU's graphs, here eagerly)."""
    from ggtts.families.qwen3omni.pipeline import DECODER_GRAPH_FRAMES

    model = load(base.path)
    if decoder == "static stream":
        model.decoder.use_static_streams(model.decoder.cfg.num_quantizers, DECODER_GRAPH_FRAMES, capture=False)
    assert sorted(model.voices) == ["lena", "sam"]
    voice = read_voice(base.work / f"{name}.gguf")
    codes, seen = _icl_generate(base, text, voice, FRAMES, non_streaming=False)
    inputs = model._inputs(text, "english", name, None)
    assert inputs.prefill.shape == seen["inputs_embeds"].shape
    torch.testing.assert_close(inputs.prefill, seen["inputs_embeds"], rtol=0, atol=1e-5)
    torch.testing.assert_close(inputs.trailing, seen["trailing_text_hidden"], rtol=0, atol=1e-5)
    assert (inputs.trailing.shape[1] > 1) == (name == "sam")
    ours, ties = forced_greedy(model.talker, inputs, codes, FRAMES)
    assert codes.shape[-1] >= 40
    assert torch.equal(ours, codes) and not ties
    speech = model.synthesize(text, voice=name, language="english", temperature=0, max_frames=FRAMES)
    reference = voice.codes.T.unsqueeze(0)
    with torch.no_grad():
        whole = base.up_decoder(torch.cat([reference, codes], dim=-1))[0, 0].numpy()
    cut = reference.shape[-1] * model.decoder.cfg.total_upsample
    assert len(speech.samples) == len(whole) - cut
    np.testing.assert_allclose(speech.samples, whole[cut:], rtol=0, atol=1e-4)
    assert (model.decoder.static is not None and list(model.decoder.static.lanes) == [1]) == (decoder != "stream")


def test_the_non_streaming_in_context_prompt_is_upstreams(base: Built) -> None:
    """Upstream's other ICL layout (all the text over codec_pad, then the recording's frames over tts_pad)."""
    voice = read_voice(base.work / "lena.gguf")
    text = "Hello, world!"
    _, seen = _icl_generate(base, text, voice, 3, non_streaming=True)
    from ggtts.families.qwen3tts.prompt import talker_inputs

    ids = base.tokenizer.encode(text, parse_special=False)
    role = base.tokenizer.encode(ROLE, parse_special=True)
    ref = (base.tokenizer.encode(REF_TEXT, parse_special=False), voice.codes)
    inputs = talker_inputs(base.talker, role, ids, "english", voice.embedding, non_streaming=True, reference=ref)
    torch.testing.assert_close(inputs.prefill, seen["inputs_embeds"], rtol=0, atol=1e-5)
    torch.testing.assert_close(inputs.trailing, seen["trailing_text_hidden"], rtol=0, atol=1e-5)


def test_a_primed_decoder_is_shared_not_spent(base: Built) -> None:
    """The decoder primed with a voice's recording is kept and forked: two utterances with the voice speak the same
    audio (greedy), and the kept stream is where the recording left it."""
    model = load(base.path)
    one = model.synthesize("Hello there.", voice="lena", temperature=0, max_frames=6)
    two = model.synthesize("Hello there.", voice="lena", temperature=0, max_frames=6)
    np.testing.assert_array_equal(one.samples, two.samples)
    assert model._primed["lena"].frames == read_voice(base.work / "lena.gguf").codes.shape[0]


def test_a_base_models_warm_up_makes_its_decoders_graphs(base: Built) -> None:
    """A Base model's warm-up speaks with no voice (no recording to prime the decoder with first): with the steps as
    graphs (a GPU's; here eagerly) it makes the speech decoder's fixed-tensor streams, over which its in-context
    voices' utterances then go on from their primed decoders, making none."""
    from ggtts.families.qwen3omni.pipeline import static_decoder

    model = load(base.path)
    assert model.voices and not model.talker.cfg.speakers
    model.talker.use_static_steps(capture=False)
    static_decoder(model.talker, model.decoder, model.decoder.cfg.num_quantizers, model.lanes)
    assert model.decoder.static is not None and not model.decoder.static.lanes
    model.warm_up()
    assert list(model.decoder.static.lanes) == [1] and not model._primed
    [lane] = model.decoder.static.lanes[1]
    owners: list[object] = []
    begin = lane.begin
    lane.begin = lambda owner, begun=0: (owners.append(owner), begin(owner, begun))[1]  # type: ignore[method-assign]
    model.synthesize("Hello there.", voice="lena", temperature=0, max_frames=6)
    assert "lena" in model._primed and model.decoder.static.lanes == {1: [lane]}
    assert len(owners) == 1 and getattr(owners[0], "frames", 0) > 6  # it went on over it, from the recording's frames
    assert lane.owner is None  # given back at the utterance's end


def test_bad_in_context_voices_are_refused(base: Built, tmp_path: Path) -> None:
    out = tmp_path / "v.gguf"
    with pytest.raises(InputError, match="no words"):
        create_voice(base.path, base.work / "long.wav", out, text=" ... ")
    # an mmproj converted by llama.cpp's converter has no speech encoder: told before any work
    folder = tmp_path / "lcpp"
    folder.mkdir()
    shutil.copy(base.path, folder / base.path.name)
    mmproj = mmproj_path(base.path)
    names = GGUFFile(mmproj).names()
    variant(mmproj, folder / mmproj.name, drop=[n for n in names if n.startswith(K.ENC + ".")])
    with pytest.raises(GGUFError, match="no speech tokenizer encoder"):
        create_voice(folder / base.path.name, base.work / "long.wav", out, text=REF_TEXT)
    assert not out.exists()
    # without --text the same model still clones by x-vector
    create_voice(folder / base.path.name, base.work / "long.wav", out)
    assert not read_voice(out).in_context
    out.unlink()
    # a damaged speech encoder: one line naming the file, no voice written
    damage = (
        ({"tensors": {f"{K.ENC}.blk.1.down.weight": lambda t: t[:, :-1]}}, "do not fit together"),
        ({"meta": {K.ENC_ROPE_FREQ_BASE: float("nan")}}, "RoPE base or norm epsilon"),
        ({"meta": {K.ENC_RATIOS: ["8", "x"]}}, "not numbers of the right kind"),
        ({"meta": {K.ENC_RATIOS: [8, 0]}}, "strides or dilations are not positive"),
        ({"meta": {K.ENC_HEAD_COUNT: 3}}, "attention heads do not fit"),
        ({"meta": {K.ENC_CODEBOOKS: 1}}, "codebooks, window or frame length"),
        ({"tensors": {f"{K.ENC}.quant.rest.codebook.weight": lambda t: t[:-1]}}, "'rest' quantizer does not fit"),
        ({"tensors": {f"{K.ENC}.conv_in.weight": lambda t: t * float("inf")}}, "not finite numbers"),
    )
    for i, (change, message) in enumerate(damage):
        folder = tmp_path / f"enc{i}"
        folder.mkdir()
        shutil.copy(base.path, folder / base.path.name)
        variant(mmproj, folder / mmproj.name, **change)
        with pytest.raises(GGUFError, match=f"^{folder}.*{message}") as refused:
            create_voice(folder / base.path.name, base.work / "long.wav", out, text=REF_TEXT)
        assert "\n" not in str(refused.value)
        assert not out.exists()
    # a voice file with more frames of codes than a 120 s recording makes
    longer = variant(base.work / "lena.gguf", tmp_path / "long.gguf", tensors={V.CODES: lambda t: t.repeat(30, 1)})
    with pytest.raises(GGUFError, match="1 to 1500 frames"):
        read_voice(longer)
    # codes beyond the model's codebooks, frames of the wrong width, or not whole numbers: refused in one line
    for i, (bad, match) in enumerate(((lambda t: t + 1000.0, "outside this model's codebooks"),
                                      (lambda t: t[:, :-1], "not frames of 16 codes"),
                                      (lambda t: t + 0.5, "whole"))):  # fmt: skip
        folder = tmp_path / f"bad{i}"
        folder.mkdir()
        for f in (base.path, mmproj):
            shutil.copy(f, folder / f.name)
        variant(base.work / "lena.gguf", folder / "lena.gguf", tensors={V.CODES: bad})
        if match == "whole":
            with pytest.raises(GGUFError, match=match):
                read_voice(folder / "lena.gguf")
            continue
        model = load(folder / base.path.name)
        with pytest.raises(InputError, match=match):
            model.synthesize("Hello.", voice="lena", max_frames=3)


def test_the_command_line_makes_an_in_context_voice(base: Built, tmp_path: Path) -> None:
    folder = tmp_path / "models"
    folder.mkdir()
    for f in (base.path, mmproj_path(base.path)):
        shutil.copy(f, folder / f.name)
    out = folder / "kim.gguf"
    made = subprocess.run([sys.executable, "-m", "ggtts.cli", "voice", "create", str(base.work / "long.wav"), "-m",
                           str(folder / base.path.name), "-o", str(out), "--text", REF_TEXT],
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert made.returncode == 0, made.stderr
    assert "speak with -v kim" in made.stderr
    voice = read_voice(out)
    assert voice.in_context and torch.equal(voice.codes, read_voice(base.work / "lena.gguf").codes)


def test_the_voice_file_keeps_the_primed_decoder(base: Built, tmp_path: Path) -> None:
    """``voice create --text`` stores the decoder's state after the recording: a model with that decoder goes on
    from it (no decoding of the recording) and speaks what priming by decoding speaks; a state that does not fit
    (damaged, cut short, made by another decoder) is passed over and the recording decoded instead."""
    voice = read_voice(base.work / "lena.gguf")
    assert voice.decoder_state and voice.decoder_check
    model = load(base.path)
    primed = model.decoder.stream()
    primed.push(voice.codes.T.unsqueeze(0))
    new = torch.randint(0, 64, (1, 16, 9), generator=torch.Generator().manual_seed(4))
    want = primed.push(new)
    resumed = model._resumed(voice)
    assert resumed is not None and resumed.frames == voice.codes.shape[0]
    torch.testing.assert_close(resumed.push(new), want, rtol=0, atol=1e-6)
    name = next(n for n, t in voice.decoder_state.items() if t.numel() > 1)
    numel = voice.decoder_state[name].numel()
    entries = [f"{n}={','.join(map(str, t.shape))}" for n, t in voice.decoder_state.items()]
    flattened = [f"{n}={t.numel()}" for n, t in voice.decoder_state.items()]
    others = [e for e in entries if not e.startswith(f"{name}=")]
    for i, change in enumerate(({"tensors": {f"{V.DECODER_STATE}.{name}": lambda t: t * float("nan")}},
                                {"tensors": {f"{V.DECODER_STATE}.{name}": lambda t: t[:-1]}},
                                {"meta": {V.DECODER_SHAPES: [f"{name}=1,2,3"]}},
                                {"meta": {V.DECODER_SHAPES: flattened}},  # adds up, but not for the decoder
                                {"meta": {V.DECODER_SHAPES: [*others, f"{name}=-1,-{numel}"]}},  # negative dims
                                {"meta": {V.DECODER_SHAPES: [*others, f"{name}={2**61 + 1},{numel}"]}},
                                {"meta": {V.DECODER_SHAPES: others}, "drop": [f"{V.DECODER_STATE}.{name}"]},
                                {"meta": {V.DECODER_CHECK: "another decoder"}})):  # fmt: skip
        folder = tmp_path / str(i)
        folder.mkdir()
        for f in (base.path, mmproj_path(base.path)):
            shutil.copy(f, folder / f.name)
        variant(base.work / "lena.gguf", folder / "lena.gguf", **change)
        other = load(folder / base.path.name)
        assert other._resumed(read_voice(folder / "lena.gguf")) is None
        torch.testing.assert_close(other.decoder_stream("lena").push(new), want, rtol=0, atol=1e-6)
