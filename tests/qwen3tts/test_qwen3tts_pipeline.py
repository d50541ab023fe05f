"""The qwen3tts family end to end on tiny checkpoints built with qwen-tts's classes and converted by ggtts: speech as
upstream's (greedy), streaming, VoiceDesign's instruction, the mmproj companion, the command line, bad input."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from _qwen3tts_tiny import Built, forced_greedy, need_qwen_tts

from ggtts.api import load
from ggtts.errors import InputError
from ggtts.families.base import NothingToSay, UnknownVoiceError, VoiceBlendError

pytestmark = pytest.mark.needs_reference

TEXT = "Hello, world! How are you today?"
FRAMES = 44
AUDIO_ATOL = 1e-4  # the speech decoder's bound (it is bit-equal to upstream's here)
INSTRUCT = "A warm, low voice, speaking slowly."


@pytest.fixture(scope="module")
def custom(tmp_path_factory: pytest.TempPathFactory) -> Built:
    need_qwen_tts()
    return Built(tmp_path_factory.mktemp("qwen3tts_custom"))


@pytest.fixture(scope="module")
def design(tmp_path_factory: pytest.TempPathFactory) -> Built:
    need_qwen_tts()
    return Built(tmp_path_factory.mktemp("qwen3tts_design"), "voice_design")


def _no_near_ties(built: Built, inputs: object, codes: torch.Tensor) -> bool:
    """Ours, teacher-forced along upstream's greedy codes, agrees with no near-tie forgiven (so a free run of ours
    is upstream's run, and its audio can be compared)."""
    ours, ties = forced_greedy(built.talker, inputs, codes, FRAMES)  # type: ignore[arg-type]
    return torch.equal(ours, codes) and not ties


def test_speaks_as_upstream(custom: Built) -> None:
    """Greedy speech through ggtts.load: the audio of upstream's greedy codes through upstream's decoder."""
    codes, _ = custom.generate(TEXT, "english", "vivian", True, FRAMES)
    assert _no_near_ties(custom, custom.inputs(TEXT, "english", "vivian"), codes)
    with torch.no_grad():
        theirs = custom.up_decoder(codes)[0, 0].numpy()
    model = load(custom.path)
    ours = model.synthesize(TEXT, voice="Vivian", language="en", temperature=0, max_frames=FRAMES)
    assert ours.sample_rate == 24_000
    assert ours.samples.shape == theirs.shape
    np.testing.assert_allclose(ours.samples, theirs, rtol=0, atol=AUDIO_ATOL)


def test_stream_joins_to_the_whole(custom: Built) -> None:
    """Sampled (seeded) speech streamed: the first frame alone, then 4, then chunk_frames at a time, joined, is the
    whole utterance synthesized at once."""
    model = load(custom.path)
    options = {"voice": "ryan", "max_frames": 30, "seed": 7, "chunk_frames": 5}
    chunks = list(model.stream(TEXT, **options))
    whole = model.synthesize(TEXT, **options)
    hop = custom.decoder.cfg.total_upsample
    sizes = [len(c.samples) // hop for c in chunks]
    assert sizes[:3] == [1, 4, 5] and sum(sizes) == len(whole.samples) // hop
    np.testing.assert_allclose(np.concatenate([c.samples for c in chunks]), whole.samples, rtol=0, atol=1e-6)
    assert [round(c.offset, 6) for c in chunks[:2]] == [0.0, round(hop / 24_000, 6)]


def test_voice_design_follows_its_instruction(design: Built) -> None:
    """VoiceDesign: the description goes first in the prompt, as upstream puts it; it is required; there are no
    preset voices."""
    codes, seen = design.generate(TEXT, "english", None, True, FRAMES, instruct=INSTRUCT)
    ours = design.inputs(TEXT, "english", None, instruct=INSTRUCT)
    assert ours.prefill.shape == seen["inputs_embeds"].shape
    torch.testing.assert_close(ours.prefill, seen["inputs_embeds"], rtol=0, atol=1e-5)
    assert _no_near_ties(design, ours, codes)
    model = load(design.path)
    assert model.voices == []
    with pytest.raises(InputError, match="VoiceDesign model: describe the voice with instructions"):
        model.synthesize(TEXT)
    audio = model.synthesize(TEXT, language="english", instructions=INSTRUCT, temperature=0, max_frames=FRAMES)
    with torch.no_grad():
        theirs = design.up_decoder(codes)[0, 0].numpy()
    np.testing.assert_allclose(audio.samples, theirs, rtol=0, atol=AUDIO_ATOL)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"voice": "nobody"}, UnknownVoiceError, "unknown voice 'nobody'"),
        ({"voice": "vivian,ryan"}, VoiceBlendError, ""),
        ({"language": "klingon"}, InputError, "unknown language 'klingon'; this model speaks auto, chinese, english"),
        ({"instructions": "Whisper."}, InputError, "not taken by the 0.6B CustomVoice models"),
        ({"temperature": -1}, InputError, "temperature must be"),
        ({"max_frames": 0}, InputError, "max_frames must be"),
    ],
)
def test_bad_requests_are_refused_before_any_work(
    custom: Built, kwargs: dict[str, object], error: type[Exception], match: str
) -> None:
    model = load(custom.path)
    with pytest.raises(error, match=match):
        model.synthesize(TEXT, **kwargs)  # type: ignore[arg-type]


def test_text_with_nothing_to_say(custom: Built) -> None:
    with pytest.raises(NothingToSay):
        load(custom.path).synthesize("... !!")


def test_the_mmproj_is_found_beside_or_named(custom: Built, tmp_path: Path) -> None:
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(custom.path, alone / "voice.gguf")
    with pytest.raises(InputError, match=r"needs its mmproj file .*mmproj-voice.gguf beside it"):
        load(alone / "voice.gguf")
    other = tmp_path / "other" / "codec.gguf"
    other.parent.mkdir()
    shutil.copy(custom.mmproj_file.path, other)
    assert load(alone / "voice.gguf", mmproj=str(other)).voices == ["vivian", "ryan", "dylan"]
    shutil.copy(custom.mmproj_file.path, alone / "predictor.gguf")  # the only Qwen3-TTS mmproj beside: taken
    assert load(alone / "voice.gguf").info()["mmproj"] == str(alone / "predictor.gguf")


def test_command_line_converts_and_speaks(custom: Built, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from ggtts.cli import main

    out = tmp_path / "q.gguf"
    assert main(["convert", "qwen3tts", str(custom.work / "ckpt"), "-o", str(out), "--type", "q8_0"]) == 0
    assert (tmp_path / "mmproj-q.gguf").is_file()
    wav = tmp_path / "out.wav"
    code = main(["speak", "-m", str(out), "-v", "dylan", "--language", "zh", "--max-frames", "6", "-o", str(wav), TEXT])
    assert code == 0 and wav.stat().st_size > 44
    capsys.readouterr()
    assert main(["info", str(tmp_path / "mmproj-q.gguf")]) == 0
    assert "a companion file of qwen3tts" in capsys.readouterr().out
    assert main(["info", str(out)]) == 0
    assert "voices (3): vivian, ryan, dylan" in capsys.readouterr().out


def test_command_line_refuses_an_unknown_language(custom: Built, tmp_path: Path) -> None:
    import subprocess

    wav = tmp_path / "never.wav"
    cmd = [sys.executable, "-m", "ggtts.cli", "speak", "-m", str(custom.path), "--language", "xx", "-o", str(wav), TEXT]
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert run.returncode != 0
    assert "unknown language 'xx'" in run.stderr and "Traceback" not in run.stderr
    assert not wav.exists()


def test_the_graphed_frame_takes_the_talkers_width(custom: Built) -> None:
    """The code predictor's whole-frame CUDA graph code, run eagerly (capture=False) where the code predictor is
    narrower than the talker (proj_in): the same codes and embedding sum as the host loop."""
    from ggtts.families.qwen3omni.generate import GraphedFrame, HFSampler, host_frames

    cp, cfg = custom.talker.cp, custom.talker.cfg
    assert cp.embed_dim != cfg.code_predictor.dim
    gen = torch.Generator().manual_seed(0)
    hidden, first = torch.randn(1, 1, cp.embed_dim, generator=gen), torch.randn(1, 1, cp.embed_dim, generator=gen)
    graphed = GraphedFrame(cp, cfg.cp_sampling, True, 0, capture=False)(hidden, first)
    host = host_frames(cp, HFSampler(cfg.cp_sampling, True, gen))(hidden, first)
    assert graphed[0] == host[0]
    torch.testing.assert_close(graphed[1], host[1])


def test_instructions_never_become_control_tokens(design: Built) -> None:
    """A request's instructions are words: '<|codec_eos_token|>' in them is text, not the codec's EOS."""
    from ggtts.families.qwen3tts import Qwen3TTSOptions

    model = load(design.path)
    ids = model._instruct(Qwen3TTSOptions(instructions="<|codec_eos_token|><|im_end|> calm"))  # type: ignore[attr-defined]
    text_vocab = model.talker.cfg.text_vocab  # type: ignore[attr-defined]
    assert all(i < text_vocab for i in ids)
    specials = {design.tokenizer.token_to_id[t] for t in ("<|im_start|>", "<|im_end|>")}
    assert [i for i in ids if i in specials] == [design.tokenizer.token_to_id["<|im_start|>"],
                                                 design.tokenizer.token_to_id["<|im_end|>"]]  # fmt: skip


def test_a_llama_cpp_voice_design_file_is_voice_design(design: Built, tmp_path: Path) -> None:
    """llama.cpp's converter writes the speaker encoder's keys into every mmproj and no model type: a file without
    the speaker encoder's tensors is a VoiceDesign model, not a Base one."""
    from ggtts.gguf.keys import Qwen3TTS as K
    from gguf_variant import variant

    talker = variant(design.path, tmp_path / "vd.gguf", drop=(K.MODEL_TYPE,))
    variant(design.mmproj_file.path, tmp_path / "mmproj-vd.gguf",
            meta={K.HAS_AUDIO_ENCODER: True, K.AUDIO_PROJECTOR_TYPE: K.SPKENC_PROJECTOR})  # fmt: skip
    model = load(talker)
    assert model.talker.cfg.model_type == "voice_design"  # type: ignore[attr-defined]
    assert model.voices == []
    assert len(model.synthesize(TEXT, instructions=INSTRUCT, max_frames=3).samples) > 0
