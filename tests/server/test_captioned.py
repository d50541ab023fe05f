"""``/v1/audio/captioned_speech`` (and Kokoro-FastAPI's ``/dev/captioned_speech``): audio with word timestamps,
whole or as one JSON line per chunk."""

from __future__ import annotations

import base64
import json

import httpx
import pytest
from audio_check import decode
from server_support import Server

CAPTIONED = "/v1/audio/captioned_speech"
TEXT = "Hello there, world! It costs $5 today."
WORDS = ["Hello", "there", "world", "It", "costs", "$5", "today"]
TIMEOUT_S = 120


def _post(server: Server, body: dict[str, object], path: str = CAPTIONED) -> httpx.Response:
    return httpx.post(server.url + path, json=body, headers=server.headers, timeout=TIMEOUT_S)


@pytest.mark.parametrize("path", [CAPTIONED, "/dev/captioned_speech"])
def test_whole_response_has_audio_and_every_word(kokoro_server: Server, path: str) -> None:
    response = _post(kokoro_server, {"input": TEXT, "response_format": "wav", "stream": False}, path)
    assert response.status_code == 200, response.text
    body = response.json()
    assert set(body) == {"audio", "audio_format", "timestamps"} and body["audio_format"] == "audio/wav"
    samples, rate = decode(base64.b64decode(body["audio"]), "wav", 24000)
    assert rate == 24000
    assert [t["word"] for t in body["timestamps"]] == WORDS
    assert all(set(t) == {"word", "start_time", "end_time"} for t in body["timestamps"])
    assert body["timestamps"][0]["start_time"] >= 0 and body["timestamps"][-1]["end_time"] <= len(samples) / rate
    plain = httpx.post(
        kokoro_server.url + "/v1/audio/speech",
        json={"input": TEXT, "response_format": "wav", "stream": False},
        timeout=TIMEOUT_S,
    )
    assert base64.b64decode(body["audio"]) == plain.content  # the same audio as /v1/audio/speech


# the tiny model reads 62 phonemes at a time: the number is said across two chunks, and captioned once
ACROSS = "I paid $1,234,567.89 today."


@pytest.mark.parametrize("text", [TEXT, ACROSS])
def test_streamed_lines_join_into_the_whole(kokoro_server: Server, text: str) -> None:
    whole = _post(kokoro_server, {"input": text, "response_format": "pcm", "stream": False}).json()
    response = _post(kokoro_server, {"input": text, "response_format": "pcm"})  # streams by default
    assert response.status_code == 200 and response.headers["content-type"] == "application/x-ndjson"
    lines = [json.loads(line) for line in response.text.splitlines()]
    assert len(lines) >= 3  # two chunks (cut after "there,"; inside the number) and the encoder's end
    audio = b"".join(base64.b64decode(line["audio"]) for line in lines)
    assert audio == base64.b64decode(whole["audio"])
    assert [t for line in lines for t in line["timestamps"]] == whole["timestamps"]


def test_timestamps_can_be_left_out(kokoro_server: Server) -> None:
    body = _post(kokoro_server, {"input": TEXT, "stream": False, "return_timestamps": False}).json()
    assert body["timestamps"] == [] and body["audio"]


def test_a_model_without_timestamps_is_a_400(tone_server: Server) -> None:
    response = _post(tone_server, {"model": "tone", "input": "one two", "stream": False})
    assert response.status_code == 400
    assert "gives no word timestamps" in response.json()["error"]["message"]
    fine = _post(tone_server, {"model": "tone", "input": "one two", "stream": False, "return_timestamps": False})
    assert fine.status_code == 200 and fine.json()["timestamps"] == []


def test_bad_requests_are_400s(kokoro_server: Server) -> None:
    assert _post(kokoro_server, {"input": " ", "stream": False}).status_code == 400
    assert _post(kokoro_server, {"input": TEXT, "voice": "nobody"}).status_code == 400
    assert _post(kokoro_server, {"input": TEXT, "response_format": "flac"}).status_code == 400  # flac cannot stream
    assert _post(kokoro_server, {"input": TEXT, "lang_code": "xx", "stream": False}).status_code == 400
    unknown = _post(kokoro_server, {"input": TEXT, "unknown": 1})
    assert unknown.status_code == 422 and unknown.json()["error"]["param"] == "unknown"


def test_an_unknown_field_lists_this_routes_fields(kokoro_server: Server) -> None:
    response = _post(kokoro_server, {"input": TEXT, "volume": 2})
    assert response.status_code == 422
    message = response.json()["error"]["message"]
    assert "'volume' is not a field" in message and "return_timestamps" in message and "volume_multiplier" in message
