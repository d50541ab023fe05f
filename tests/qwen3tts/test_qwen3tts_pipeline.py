"""The qwen3tts family end to end on tiny checkpoints built with qwen-tts's classes and converted by ggtts: speech as
upstream's (greedy), streaming, VoiceDesign's instruction, the mmproj companion, the command line, bad input."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from _qwen3tts_tiny import Built, forced_greedy, need_qwen_tts
from gguf import GGMLQuantizationType

from ggtts.api import load
from ggtts.errors import InputError
from ggtts.families.base import NothingToSay, UnknownVoiceError, VoiceBlendError
from ggtts.gguf import GGUFFile
from ggtts.text.lexicon import Lexicon

pytestmark = pytest.mark.needs_reference

TEXT = "Hello, world! How are you today?"
FRAMES = 44
AUDIO_ATOL = 1e-4  # the speech decoder's bound (it is within ~3e-7 of upstream's here)
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


@pytest.mark.parametrize("decoder", ["stream", "static stream"])
def test_speaks_as_upstream(custom: Built, decoder: str) -> None:
    """Greedy speech through ggtts.load: the audio of upstream's greedy codes through upstream's decoder; also with
    the decoder's pushes over fixed tensors, as a GPU runs them (graphs, here eagerly)."""
    from ggtts.families.qwen3omni.pipeline import DECODER_GRAPH_FRAMES

    codes, _ = custom.generate(TEXT, "english", "vivian", True, FRAMES)
    assert _no_near_ties(custom, custom.inputs(TEXT, "english", "vivian"), codes)
    with torch.no_grad():
        theirs = custom.up_decoder(codes)[0, 0].numpy()
    model = load(custom.path)
    if decoder == "static stream":
        model.decoder.use_static_streams(model.decoder.cfg.num_quantizers, DECODER_GRAPH_FRAMES, capture=False)
    ours = model.synthesize(TEXT, voice="Vivian", language="en", temperature=0, max_frames=FRAMES)
    assert (model.decoder.static is not None and list(model.decoder.static.lanes) == [1]) == (decoder != "stream")
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
    # the code predictor's ffn_down: BF16 under a block type (its input's range; upstream's own type), F32 in f16
    down = "a.gen.code.blk.0.ffn_down.weight"
    assert GGUFFile(tmp_path / "mmproj-q.gguf").info(down).type == GGMLQuantizationType.BF16
    assert (
        main(["convert", "qwen3tts", str(custom.work / "ckpt"), "-o", str(tmp_path / "h.gguf"), "--type", "f16"]) == 0
    )
    assert GGUFFile(tmp_path / "mmproj-h.gguf").info(down).type == GGMLQuantizationType.F32
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


def test_kokoro_fastapis_lang_code_is_the_language(custom: Built) -> None:
    """Kokoro-FastAPI's clients send lang_code: for Qwen3-TTS it is the language option (as options.language)."""
    from fastapi.testclient import TestClient

    from ggtts.server.app import create_app
    from ggtts.server.settings import ServerSettings

    body = {"input": TEXT, "voice": "vivian", "response_format": "pcm", "stream": False}
    sampling = {"temperature": 0, "max_frames": 6}
    with TestClient(create_app({"cv": load(custom.path)}, ServerSettings())) as client:
        by_code = client.post("/v1/audio/speech", json={**body, "lang_code": "zh", "options": sampling})
        by_option = client.post("/v1/audio/speech", json={**body, "options": {**sampling, "language": "zh"}})
        english = client.post("/v1/audio/speech", json={**body, "lang_code": "en", "options": sampling})
        unknown = client.post("/v1/audio/speech", json={**body, "lang_code": "xx", "options": sampling})
    assert by_code.status_code == 200 and by_code.content == by_option.content != english.content
    assert unknown.status_code == 400 and "unknown language 'xx'" in unknown.json()["error"]["message"]


def test_the_graphed_frame_takes_the_talkers_width(custom: Built) -> None:
    """The code predictor's whole-frame CUDA graph code, run eagerly (capture=False) where the code predictor is
    narrower than the talker (proj_in): the same codes and embedding sum as the host loop."""
    from ggtts.families.qwen3omni.generate import GraphedFrame, HFSampler, HostFrames

    cp, cfg = custom.talker.cp, custom.talker.cfg
    assert cp.embed_dim != cfg.code_predictor.dim
    gen = torch.Generator().manual_seed(0)
    hidden, first = torch.randn(1, 1, cp.embed_dim, generator=gen), torch.randn(1, 1, cp.embed_dim, generator=gen)
    graphed = GraphedFrame(cp, cfg.cp_sampling, True, 0, capture=False)(hidden, first)
    host = HostFrames(cp, HFSampler(cfg.cp_sampling, True, gen))(hidden, first)
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


def test_bfloat16_decoder_where_native_else_one_clear_error(custom: Built) -> None:
    """``precision="bfloat16"``: the speech decoder's convolutions in bfloat16 (close to float32, not equal; the
    output convolution stays float32), refused in one line where the CPU has no native bfloat16."""
    from ggtts.ops.precision import bfloat16_supported

    with pytest.raises(InputError, match="unknown precision 'float8'"):
        load(custom.path, precision="float8")
    if not bfloat16_supported():
        with pytest.raises(InputError, match="no native bfloat16"):
            load(custom.path, precision="bfloat16")
        return
    bf16 = load(custom.path, precision="bfloat16")
    codes = torch.randint(0, 64, (1, 16, 30), generator=torch.Generator().manual_seed(7))
    want, got = custom.decoder(codes), bf16.decoder(codes)
    rel = float((got - want).norm() / want.norm())
    assert 0 < rel < 0.05, rel
    assert bf16.decoder.dac.post_conv.conv._copies()[0].dtype == torch.float32
    assert bf16.decoder.dac.entry.conv._copies()[0].dtype == torch.bfloat16


def test_the_code_predictors_heads_run_as_stored(tmp_path: Path) -> None:
    """In a q8_0 file each head is a slice of the stacked tensor run by ggml as stored (where its kernels are
    installed): the same logits as the heads widened to float32, within q8_0's arithmetic; each table a slice
    whose looked-up rows are the widened table's, exactly. (A code predictor 32 wide: q8_0 blocks need rows of
    whole 32s; the tiny one's 24 stay F32.)"""
    from ggtts.convert.qwen3tts_hf import convert_qwen3tts
    from ggtts.measure.qwen3tts.upstream import build_tiny_checkpoint
    from ggtts.models.qwen3tts.model import Talker
    from ggtts.ops.stored_weights import StoredLinear, stored_weights_plan

    if not stored_weights_plan("cpu").stored:
        pytest.skip("ggml's kernels are not installed")
    build_tiny_checkpoint(tmp_path / "ckpt", "custom_voice", cp_width=32)
    path = convert_qwen3tts([tmp_path / "ckpt"], tmp_path / "q.gguf", "q8_0")
    talker, mmproj = GGUFFile(path), GGUFFile(tmp_path / "mmproj-q.gguf")
    stored = Talker.from_gguf(talker, mmproj).cp
    widened = Talker.from_gguf(talker, mmproj, stored_weights=False).cp
    assert all(isinstance(head, StoredLinear) for head in stored.output)
    h = torch.randn(3, 1, stored.output[0].in_features, generator=torch.Generator().manual_seed(5))
    for j in (0, 7, len(stored.output) - 1):
        want, got = widened.output[j](h), stored.output[j](h)
        assert float((got - want).abs().max()) <= 0.02 * float(want.abs().max())
        assert j == 0 or not torch.allclose(stored.output[0](h), got)  # each its own slice
    from ggtts.ops.stored_weights import StoredEmbedding

    assert all(isinstance(table, StoredEmbedding) for table in stored.codec_embd)
    ids = torch.tensor([[0, 5, 63]])
    for j in (0, 7, len(stored.codec_embd) - 1):
        assert torch.equal(stored.codec_embd[j](ids), widened.codec_embd[j](ids))


def test_markup_never_reaches_the_talker(custom: Built, monkeypatch: pytest.MonkeyPatch) -> None:
    """An LLM's reply: the text the talker reads has its Markdown, HTML and decorative emoji taken away;
    ``normalization=False`` keeps them; markup alone has nothing to say, named as written."""
    model = load(custom.path)
    seen: list[str] = []
    inputs = model._inputs
    monkeypatch.setattr(model, "_inputs", lambda text, *a: seen.append(text) or inputs(text, *a))
    model.synthesize("**Hello**, <b>world</b>! ✅", voice="ryan", max_frames=2)
    model.synthesize("**Hello**, world!", voice="ryan", max_frames=2, normalization=False)
    model.lexicon = Lexicon.of({"world": "planet"})  # (a lexicon's words: first, always)
    model.synthesize("**Hello**, world!", voice="ryan", max_frames=2)
    assert seen == ["Hello, world!", "**Hello**, world!", "Hello, planet!"]
    with pytest.raises(NothingToSay, match=re.escape("'<b></b> ✅'")):
        model.synthesize("<b></b> ✅")
