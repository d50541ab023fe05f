"""``ggtts serve`` with a Qwen3-Omni thinker (a tiny transformers-built one, its talker beside it): the talker's
speakers as voices, whole and streamed speech that agree, and a 4xx for a voice the model lacks."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from server_support import Server, check_normalization_defaults_not_applicable, start_server, stop_server

pytestmark = pytest.mark.needs_reference

SPEECH = "/v1/audio/speech"
TIMEOUT_S = 120
TEXT = "Hello, world! How are you today?"


@pytest.fixture(scope="module")
def omni_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    pytest.importorskip("transformers", reason="needs transformers to build the reference model")
    from ggtts.convert.qwen3omni_talker import convert_qwen3omni_talker
    from ggtts.convert.qwen3omni_thinker import convert_qwen3omni_thinker
    from ggtts.measure.qwen3omni.upstream import build_tiny_checkpoint

    work = tmp_path_factory.mktemp("qwen3omni-server")
    build_tiny_checkpoint(work / "checkpoint", seed=1)
    thinker = convert_qwen3omni_thinker([work / "checkpoint"], work / "thinker.gguf", "f32")
    convert_qwen3omni_talker([work / "checkpoint"], work / "talker.gguf", "q8_0")  # beside the thinker: found there
    cmd = [str(Path(sys.executable).parent / "ggtts"), "serve", "-m", f"omni={thinker}"]
    server = start_server(cmd, tmp_path_factory.mktemp("qwen3omni-server-log") / "server.log")
    yield server
    stop_server(server)


def post(server: Server, body: dict[str, object]) -> httpx.Response:
    return httpx.post(server.url + SPEECH, json={"model": "omni", **body}, timeout=TIMEOUT_S)


def test_voices_are_the_talkers_speakers(omni_server: Server) -> None:
    voices = httpx.get(omni_server.url + "/v1/voices").json()["data"]
    assert voices == [{"model": "omni", "voices": ["chelsie", "ethan"], "default_voice": "ethan"}]
    models = httpx.get(omni_server.url + "/v1/models").json()["data"]
    assert [(m["id"], m["architecture"], m["sample_rate"]) for m in models] == [("omni", "qwen3omnimoe", 24000)]


def test_whole_and_streamed_speech_agree(omni_server: Server) -> None:
    whole = post(omni_server, {"input": TEXT, "voice": "chelsie", "response_format": "pcm"})
    streamed = post(omni_server, {"input": TEXT, "voice": "chelsie", "response_format": "pcm", "stream": True})
    assert whole.status_code == streamed.status_code == 200, whole.text
    samples = np.frombuffer(whole.content, dtype="<i2")
    assert len(samples) >= 4 * 24 and np.abs(samples).max() > 0  # at least four frames of 24 samples
    assert streamed.content == whole.content


def test_an_unknown_voice_is_a_400_and_the_server_goes_on(omni_server: Server) -> None:
    bad = post(omni_server, {"input": TEXT, "voice": "Nobody"})
    assert bad.status_code == 400
    assert "voice 'Nobody' is not available" in bad.json()["error"]["message"]
    assert post(omni_server, {"input": "Hello.", "voice": "ethan", "response_format": "pcm"}).status_code == 200


def test_a_kokoro_fastapi_clients_normalization_defaults_are_not_applicable(omni_server: Server) -> None:
    check_normalization_defaults_not_applicable(lambda body: post(omni_server, body), "chelsie")
