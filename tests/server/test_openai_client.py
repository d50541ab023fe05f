"""OpenAI's own Python client against a real server process, used as it is used against OpenAI: audio streams
by default, server-sent events parse with the client's own decoder, errors arrive as its exception classes."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np
import pytest
from audio_check import decode
from server_support import Server
from test_faults import chunks_made
from tone_model import ToneModel

openai = pytest.importorskip("openai")
import httpx2  # noqa: E402  (the client's HTTP library)
from openai._streaming import SSEDecoder  # noqa: E402  (the client's own SSE parser)

TEXT = "one two three four"


def client(server: Server, api_key: str | None = None) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key=api_key or server.api_key or "none", max_retries=0)


def test_streaming_response_gets_bytes_before_synthesis_ends(tone_server: Server, tone_log: Path) -> None:
    """``with_streaming_response`` with no stream option at all, as LiveKit's and Pipecat's plugins call it: the
    first bytes arrive while later chunks are still to be made (the tone log counts them: an order, not a time)."""
    words = 6  # the slow model takes 0.3 s a word
    text = " ".join(["openai"] * words)
    speech = client(tone_server).audio.speech
    with speech.with_streaming_response.create(model="slow", voice="alloy", input=text, response_format="pcm") as r:
        chunks = r.iter_bytes()
        first = next(chunks)
        made_at_first = chunks_made(tone_log, "openai")
        rest = b"".join(chunks)
    assert first
    assert made_at_first < words, f"the first bytes came after all {words} chunks were made"
    samples, _ = decode(first + rest, "pcm", 24000)
    np.testing.assert_allclose(samples, ToneModel().expected(text), atol=2 / 32768)


def test_plain_create_writes_a_file_that_decodes(tone_server: Server, tmp_path: Path) -> None:
    response = client(tone_server).audio.speech.create(
        model="gpt-4o-mini-tts", voice="coral", input=TEXT, response_format="wav"
    )
    response.write_to_file(tmp_path / "out.wav")
    samples, rate = decode((tmp_path / "out.wav").read_bytes(), "wav", 24000)
    assert rate == 24000
    np.testing.assert_allclose(samples, ToneModel().expected(TEXT), atol=2 / 32768)


def test_sse_events_carry_the_audio(tone_server: Server) -> None:
    """``stream_format="sse"``: OpenAI's ``speech.audio.delta`` events, each a base64 piece of the audio, then one
    ``speech.audio.done`` with usage; the pieces join into the audio a plain request gives."""
    speech = client(tone_server).audio.speech
    with speech.with_streaming_response.create(
        model="tone", voice="high", input=TEXT, response_format="pcm", stream_format="sse"
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(e.data) for e in SSEDecoder().iter_bytes(response.iter_bytes())]
    kinds = [e["type"] for e in events]
    assert kinds == ["speech.audio.delta"] * (len(kinds) - 1) + ["speech.audio.done"]
    assert len(kinds) - 1 == len(TEXT.split())  # one delta per chunk the model made
    pcm = b"".join(base64.b64decode(e["audio"]) for e in events[:-1])
    samples, _ = decode(pcm, "pcm", 24000)
    np.testing.assert_allclose(samples, ToneModel().expected(TEXT, "high"), atol=2 / 32768)
    usage = events[-1]["usage"]
    chars, chunks = len(TEXT), len(TEXT.split())
    assert usage == {"input_tokens": chars, "output_tokens": chunks, "total_tokens": chars + chunks}


def test_sse_failure_mid_stream_is_an_error_event(tone_server: Server) -> None:
    speech = client(tone_server).audio.speech
    events: list[dict[str, object]] = []
    with (
        pytest.raises(httpx2.RemoteProtocolError),  # cut after the error event: the client sees a broken transfer
        speech.with_streaming_response.create(
            model="tone", voice="low", input="one two FAIL", response_format="pcm", stream_format="sse"
        ) as response,
    ):
        for event in SSEDecoder().iter_bytes(response.iter_bytes()):
            events.append(json.loads(event.data))
    assert [e["type"] for e in events] == ["speech.audio.delta", "speech.audio.delta", "error"]
    assert events[-1]["error"]["code"] == "synthesis_failed"  # type: ignore[index]


def test_aac_streams_and_decodes(tone_server: Server) -> None:
    speech = client(tone_server).audio.speech
    with speech.with_streaming_response.create(model="tone", voice="high", input=TEXT, response_format="aac") as r:
        assert r.headers["content-type"] == "audio/aac"
        data = r.read()
    samples, rate = decode(data, "aac", 24000)
    expected = ToneModel().expected(TEXT, "high")
    assert rate == 24000 and len(expected) <= len(samples) <= len(expected) + 4096
    assert np.sqrt(np.mean(samples**2)) > 0.1


def test_errors_are_the_clients_exception_classes(tone_server: Server) -> None:
    speech = client(tone_server).audio.speech
    with pytest.raises(openai.NotFoundError) as missing:
        speech.create(model="no-such-model", voice="alloy", input=TEXT)
    assert missing.value.body["param"] == "model"  # type: ignore[index]
    with pytest.raises(openai.BadRequestError) as voice:
        speech.create(model="tone", voice="nobody", input=TEXT)
    assert "low, high" in voice.value.message
    with pytest.raises(openai.BadRequestError) as instructed:
        speech.create(model="tone", voice="alloy", input=TEXT, instructions="Whisper it.")
    assert instructed.value.body["param"] == "instructions"  # type: ignore[index]
    with pytest.raises(openai.UnprocessableEntityError):
        speech.create(model="tone", voice="alloy", input=TEXT, speed=9.0)
    with pytest.raises(openai.AuthenticationError):
        client(tone_server, api_key="wrong-key").audio.speech.create(model="tone", voice="alloy", input=TEXT)


@pytest.mark.parametrize("speed", [0.25, 4.0])
def test_openais_speed_range_is_taken(tone_server: Server, speed: float) -> None:
    """OpenAI's endpoint takes speeds 0.25 to 4.0; a client sending its bounds gets speech, not a 422."""
    pcm = (
        client(tone_server)
        .audio.speech.create(model="tone", voice="high", input=TEXT, response_format="pcm", speed=speed)
        .content
    )
    samples = np.frombuffer(pcm, "<i2") / 32768
    np.testing.assert_allclose(samples, ToneModel().expected(TEXT, "high", speed), atol=2 / 32768)


def test_a_custom_voice_object_names_a_voice(tone_server: Server) -> None:
    speech = client(tone_server).audio.speech
    by_object = speech.create(model="tone", voice={"id": "high"}, input=TEXT, response_format="pcm").content
    by_name = speech.create(model="tone", voice="high", input=TEXT, response_format="pcm").content
    low = speech.create(model="tone", voice="low", input=TEXT, response_format="pcm").content
    assert by_object == by_name and by_object != low
