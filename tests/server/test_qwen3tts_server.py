"""``ggtts serve`` with Qwen3-TTS (tiny qwen-tts-built CustomVoice and VoiceDesign checkpoints, each beside its
mmproj): the speakers as voices, OpenAI's ``instructions`` as VoiceDesign's description of the voice (required
there, a 400 naming it where a model cannot follow it), through OpenAI's own client."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from server_support import Server, start_server, stop_server

pytestmark = pytest.mark.needs_reference

SPEECH = "/v1/audio/speech"
TIMEOUT_S = 120
TEXT = "Hello, world! How are you today?"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    if importlib.util.find_spec("qwen_tts") is None:
        pytest.skip("needs qwen-tts (pip install --no-deps qwen-tts-hf==0.1.1.post1)")
    import soundfile

    from ggtts.convert.qwen3tts_hf import convert_qwen3tts
    from ggtts.families.qwen3tts.voices import create_voice
    from ggtts.measure.qwen3tts.upstream import build_tiny_checkpoint, voice_like

    work = tmp_path_factory.mktemp("qwen3tts-server")
    models = []
    for name, kind in (("cv", "custom_voice"), ("vd", "voice_design"), ("base", "base")):
        build_tiny_checkpoint(work / name, kind)
        models.append(f"{name}={convert_qwen3tts([work / name], work / name / f'{name}.gguf', 'f32')}")
    soundfile.write(work / "ref.wav", voice_like(2.0, 3), 24_000)
    create_voice(work / "base" / "base.gguf", work / "ref.wav", work / "base" / "anna.gguf")  # beside the model
    create_voice(work / "base" / "base.gguf", work / "ref.wav", work / "base" / "bea.gguf", text="Some words.")
    cmd = [str(Path(sys.executable).parent / "ggtts"), "serve", *(a for m in models for a in ("-m", m))]
    running = start_server(cmd, tmp_path_factory.mktemp("qwen3tts-server-log") / "server.log")
    yield running
    stop_server(running)


FEW = {"options": {"max_frames": 8}}  # the tiny models' speech, 8 frames at most


def post(server: Server, body: dict[str, object]) -> httpx.Response:
    return httpx.post(server.url + SPEECH, json={"response_format": "pcm", **body}, timeout=TIMEOUT_S)


def test_voices_and_speech(server: Server) -> None:
    voices = {v["model"]: v["voices"] for v in httpx.get(server.url + "/v1/voices").json()["data"]}
    assert voices == {"cv": ["vivian", "ryan", "dylan"], "vd": [], "base": ["anna", "bea"]}
    options = {"options": {"max_frames": 8, "language": "english"}}
    reply = post(server, {"model": "cv", "input": TEXT, "voice": "ryan", **options})
    assert reply.status_code == 200, reply.text
    samples = np.frombuffer(reply.content, dtype="<i2")
    assert 0 < len(samples) <= 8 * 24 and np.abs(samples).max() > 0  # the tiny decoder: 24 samples a frame


def test_a_cloned_voice_is_taken_by_name_only(server: Server, tmp_path: Path) -> None:
    reply = post(server, {"model": "base", "input": TEXT, "voice": "anna", **FEW})
    assert reply.status_code == 200, reply.text
    assert len(reply.content) > 0
    by_path = post(server, {"model": "base", "input": TEXT, "voice": str(tmp_path / "anna.gguf"), **FEW})
    assert by_path.status_code == 400 and "voice_not_found" in by_path.text


def test_instructions_describe_a_designed_voice(server: Server) -> None:
    from openai import BadRequestError, OpenAI

    client = OpenAI(base_url=server.url + "/v1", api_key="none")
    audio = client.audio.speech.create(
        model="vd",
        voice="alloy",
        input=TEXT,
        instructions="A bright, quick voice.",
        response_format="pcm",
        extra_body=FEW,
    )
    assert len(audio.content) > 0
    with pytest.raises(BadRequestError, match="describe the voice with instructions"):
        client.audio.speech.create(model="vd", voice="alloy", input=TEXT, response_format="pcm", extra_body=FEW)
    with pytest.raises(BadRequestError, match=r"instructions are not taken by the 0\.6B CustomVoice models"):
        client.audio.speech.create(model="cv", voice="vivian", input=TEXT, instructions="Whisper.", extra_body=FEW)


def test_an_in_context_voice_speaks_over_http(server: Server) -> None:
    """A voice made with its recording's text (in context) speaks over HTTP what the model speaks in process
    (greedy; 16-bit PCM)."""
    import ggtts

    body = {"model": "base", "input": TEXT, "voice": "bea", "options": {"max_frames": 8, "temperature": 0}}
    reply = post(server, body)
    assert reply.status_code == 200, reply.text
    heard = np.frombuffer(reply.content, dtype="<i2").astype(np.float32) / 32768
    model_path = next(Path(str(a).split("=", 1)[1]) for a in server.process.args if str(a).startswith("base="))
    said = ggtts.load(model_path).synthesize(TEXT, voice="bea", max_frames=8, temperature=0).samples
    assert len(heard) == len(said) > 0
    np.testing.assert_allclose(heard, said, rtol=0, atol=2 / 32768)
