"""``ggtts serve`` with a Magpie model (a tiny NeMo-built one, its codec beside it): voices by name, whole and
streamed speech that agree, and a 4xx for a voice the model lacks."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from server_support import Server, check_normalization_options_reach_the_markup, start_server, stop_server

pytestmark = pytest.mark.needs_reference

SPEECH = "/v1/audio/speech"
TIMEOUT_S = 120
TEXT = "Hello world. This is a test."


@pytest.fixture(scope="module")
def magpie_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    pytest.importorskip("nemo.collections.tts", reason="needs NeMo (nemo_toolkit) to build the reference model")
    from ggtts.convert.magpie_nemo import convert_magpie
    from ggtts.convert.nanocodec_nemo import convert_nanocodec
    from ggtts.measure.magpie.upstream import build_tiny_codec
    from ggtts.measure.magpie.upstream_tts import build_tiny_magpie

    work = tmp_path_factory.mktemp("magpie-server")
    codec = build_tiny_codec(work / "codec.nemo", seed=2)
    model = convert_magpie([build_tiny_magpie(work / "model.nemo", codec, seed=2)], work / "magpie.gguf", "f32")
    convert_nanocodec([codec], work / "codec.gguf", "f32")  # beside the model: found there
    cmd = [str(Path(sys.executable).parent / "ggtts"), "serve", "-m", f"mp={model}"]
    server = start_server(cmd, tmp_path_factory.mktemp("magpie-server-log") / "server.log")
    yield server
    stop_server(server)


def post(server: Server, body: dict[str, object]) -> httpx.Response:
    return httpx.post(server.url + SPEECH, json={"model": "mp", **body}, timeout=TIMEOUT_S)


def test_voices_are_the_baked_speakers(magpie_server: Server) -> None:
    voices = httpx.get(magpie_server.url + "/v1/voices").json()["data"]
    assert voices == [{"model": "mp", "voices": ["Jason", "Aria", "Leo"], "default_voice": "Jason"}]
    models = httpx.get(magpie_server.url + "/v1/models").json()["data"]
    assert [(m["id"], m["architecture"], m["sample_rate"]) for m in models] == [("mp", "magpie", 22050)]


def test_whole_and_streamed_speech_agree(magpie_server: Server) -> None:
    whole = post(magpie_server, {"input": TEXT, "voice": "Aria", "response_format": "pcm"})
    streamed = post(magpie_server, {"input": TEXT, "voice": "Aria", "response_format": "pcm", "stream": True})
    assert whole.status_code == streamed.status_code == 200, whole.text
    samples = np.frombuffer(whole.content, dtype="<i2")
    assert len(samples) >= 2 * 4 * 64 and np.abs(samples).max() > 0  # two sentences of at least 4 tiny frames
    assert streamed.content == whole.content


def test_an_unknown_voice_is_a_400_and_the_server_goes_on(magpie_server: Server) -> None:
    bad = post(magpie_server, {"input": TEXT, "voice": "Nobody"})
    assert bad.status_code == 400
    assert "voice 'Nobody' is not available" in bad.json()["error"]["message"]
    assert post(magpie_server, {"input": "Hello.", "voice": "Leo", "response_format": "pcm"}).status_code == 200


def test_normalization_options_take_the_markup_away_or_keep_it(magpie_server: Server) -> None:
    check_normalization_options_reach_the_markup(lambda body: post(magpie_server, body), "Aria")
