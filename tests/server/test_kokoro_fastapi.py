"""Kokoro-FastAPI's request fields on a real server with a tiny Kokoro: what its clients send is served, each field
doing what it means there (``lang_code``, ``volume_multiplier``, ``normalization_options``, ``download_format``)."""

from __future__ import annotations

import base64
import json

import httpx
import numpy as np
import pytest
from audio_check import decode
from server_support import KOKORO_FASTAPI_NORMALIZATION, Server

SPEECH = "/v1/audio/speech"
CAPTIONED_PATHS = ["/v1/audio/captioned_speech", "/dev/captioned_speech"]
TIMEOUT_S = 120
TEXT = "It is 2 GB."
# Kokoro-FastAPI's defaults, as its clients send them: units are not read ("2 GB" stays "2" "GB")
DEFAULT_OPTIONS = KOKORO_FASTAPI_NORMALIZATION
# A body as Kokoro-FastAPI's clients send it, but for the test model's name and voice ("kokoro", "af_heart")
CLIENT_BODY = {
    "model": "tiny",
    "input": TEXT,
    "voice": "v_one",
    "response_format": "mp3",
    "download_format": "mp3",
    "speed": 1,
    "stream": True,
    "return_download_link": False,
    "lang_code": "a",
    "normalization_options": DEFAULT_OPTIONS,
}


def _post(server: Server, body: dict[str, object], path: str = SPEECH) -> httpx.Response:
    return httpx.post(server.url + path, json=body, timeout=TIMEOUT_S)


def _words(server: Server, **fields: object) -> list[str]:
    body = {"input": TEXT, "response_format": "pcm", "stream": False, **fields}
    response = _post(server, body, CAPTIONED_PATHS[0])
    assert response.status_code == 200, response.text
    return [t["word"] for t in response.json()["timestamps"]]


@pytest.mark.parametrize("stream", [True, False])
def test_a_client_body_is_served(kokoro_server: Server, stream: bool) -> None:
    response = _post(kokoro_server, {**CLIENT_BODY, "stream": stream})
    assert response.status_code == 200, response.text
    samples, rate = decode(response.content, "mp3", 24000)
    assert rate == 24000 and len(samples) > 2400


@pytest.mark.parametrize("path", CAPTIONED_PATHS)
@pytest.mark.parametrize("stream", [True, False])
def test_a_client_body_is_served_with_captions(kokoro_server: Server, path: str, stream: bool) -> None:
    response = _post(kokoro_server, {**CLIENT_BODY, "stream": stream}, path)
    assert response.status_code == 200, response.text
    lines = [json.loads(line) for line in response.text.splitlines()] if stream else [response.json()]
    assert [t["word"] for line in lines for t in line["timestamps"]] == ["It", "is", "2", "GB"]
    samples, _ = decode(b"".join(base64.b64decode(line["audio"]) for line in lines), "mp3", 24000)
    assert len(samples) > 2400


def test_normalization_options_reach_the_frontend(kokoro_server: Server) -> None:
    assert _words(kokoro_server) == ["It", "is", "2 GB"]  # no object: ggtts reads units, as always
    assert _words(kokoro_server, normalization_options={}) == ["It", "is", "2", "GB"]  # Kokoro-FastAPI's defaults
    assert _words(kokoro_server, normalization_options={"unit_normalization": True}) == ["It", "is", "2 GB"]
    off = {"normalize": False, "unit_normalization": True}  # nothing is normalized, units included
    assert _words(kokoro_server, normalization_options=off) == ["It", "is", "2", "GB"]


@pytest.mark.parametrize("stream", [False, True])
def test_volume_multiplier_scales_the_samples(kokoro_server: Server, stream: bool) -> None:
    body = {"input": TEXT, "response_format": "pcm", "stream": stream}
    loud, _ = decode(_post(kokoro_server, body).content, "pcm", 24000)
    half, _ = decode(_post(kokoro_server, {**body, "volume_multiplier": 0.5}).content, "pcm", 24000)
    assert len(loud) == len(half) > 2400
    inside = np.abs(loud) < 1 - 2 / 32768  # the random model's loudest samples are clipped at full volume
    assert inside.mean() > 0.5 and np.abs(loud[inside]).max() > 0.1
    np.testing.assert_allclose(half[inside], loud[inside] * 0.5, atol=2 / 32768)  # 16-bit rounding, twice
    assert (np.abs(half[~inside]) >= 0.5 - 2 / 32768).all()


def test_an_unknown_language_is_a_400(kokoro_server: Server) -> None:
    response = _post(kokoro_server, {"input": TEXT, "lang_code": "xx"})
    assert response.status_code == 400
    error = response.json()["error"]
    assert "'xx'" in error["message"] and "en-gb" in error["message"] and error["param"] == "lang_code"
