"""``ggtts serve --fast-start``: streamed requests to a model whose family has the ``fast_start`` option ask for it;
whole-file requests, and models without the option, are served as without the flag."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient
from tone_model import ToneModel

import ggtts
from ggtts.audio import Audio
from ggtts.server.app import create_app
from ggtts.server.settings import ServerSettings
from ggtts.server.speaking import Speaker

SPEECH = "/v1/audio/speech"
CAPTIONED = "/v1/audio/captioned_speech"
TEXT = "hello there"


@pytest.fixture(scope="module")
def kokoro(tmp_path_factory: pytest.TempPathFactory) -> ggtts.TTSModel:
    pytest.importorskip("kokoro")
    from ggtts.measure.kokoro.upstream import write_tiny_gguf

    return ggtts.load(str(write_tiny_gguf(tmp_path_factory.mktemp("kokoro") / "tiny.gguf", name="tiny")))


def _client(models: dict[str, ggtts.TTSModel], fast_start: bool) -> TestClient:
    return TestClient(create_app(models, ServerSettings(fast_start=fast_start)), base_url="http://localhost")


def _spy(model: ggtts.TTSModel, monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """The options each stream call of ``model`` gets (it still speaks)."""
    asked: list[dict[str, Any]] = []
    real = model.stream

    def stream(text: str, voice: str | None = None, speed: float = 1.0, **options: Any) -> Iterator[Audio]:
        asked.append(options)
        return real(text, voice=voice, speed=speed, **options)

    monkeypatch.setattr(model, "stream", stream)
    return asked


@pytest.mark.parametrize(
    ("route", "body", "fast"),
    [
        (SPEECH, {"stream": True, "response_format": "pcm"}, True),
        (SPEECH, {"stream_format": "audio", "response_format": "pcm"}, True),
        (CAPTIONED, {}, True),  # streamed by default, as Kokoro-FastAPI's
        (SPEECH, {"response_format": "wav"}, True),  # streamed by default, as OpenAI's
        (SPEECH, {"response_format": "wav", "stream": False}, False),  # a whole file would only pay for the head
        (SPEECH, {"response_format": "flac"}, False),  # flac cannot be streamed: whole by default
        (CAPTIONED, {"stream": False}, False),
    ],
)
def test_streamed_requests_start_fast(
    kokoro: ggtts.TTSModel, monkeypatch: pytest.MonkeyPatch, route: str, body: dict[str, object], fast: bool
) -> None:
    asked = _spy(kokoro, monkeypatch)
    with _client({"k": kokoro}, fast_start=True) as client:
        response = client.post(route, json={"model": "k", "input": TEXT, "voice": "v_one", **body})
    assert response.status_code == 200, response.text
    assert [o.get("fast_start", False) for o in asked] == [fast]


def test_without_the_flag_nothing_starts_fast(kokoro: ggtts.TTSModel, monkeypatch: pytest.MonkeyPatch) -> None:
    asked = _spy(kokoro, monkeypatch)
    with _client({"k": kokoro}, fast_start=False) as client:
        response = client.post(SPEECH, json={"model": "k", "input": TEXT, "voice": "v_one", "stream": True})
    assert response.status_code == 200, response.text
    assert asked == [{}]


def test_a_model_without_the_option_is_served_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    tone = ToneModel()
    asked = _spy(tone, monkeypatch)
    with _client({"tone": tone}, fast_start=True) as client:
        response = client.post(SPEECH, json={"model": "tone", "input": "la", "stream": True, "response_format": "pcm"})
    assert response.status_code == 200, response.text
    assert asked == [{}]


def test_serve_passes_the_flag_to_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    import argparse

    import ggtts.server as server

    seen: list[ServerSettings] = []
    monkeypatch.setattr(server, "load_models", lambda specs, options, replicas: {})
    monkeypatch.setattr(server, "run", lambda models, settings, host, port: seen.append(settings))
    # the command hands torch's threads to the models' threads: not this test process's own threads
    monkeypatch.setattr(server, "models_on_their_threads", lambda: 3)
    parser = argparse.ArgumentParser()
    server.add_arguments(parser)
    server.serve_from_args(parser.parse_args(["--fast-start"]))
    server.serve_from_args(parser.parse_args([]))
    assert [s.fast_start for s in seen] == [True, False]
    assert [s.model_threads for s in seen] == [3, 3]


@pytest.mark.parametrize(("fast", "ready"), [(False, []), (True, ["Sure,"])])
def test_text_streamed_in_starts_at_a_one_word_clause_with_the_flag(fast: bool, ready: list[str]) -> None:
    """The live socket's and Wyoming's text streams: with ``fast_start`` a first clause of one word is ready at once,
    for any model (here one without the option); without it the first stretch waits for three words."""
    speaker = Speaker({"tone": ToneModel()}, ServerSettings(fast_start=fast))
    try:
        stream = speaker.text_stream("tone")
        assert stream.feed("Sure,") == []  # the space after the comma settles it
        assert stream.feed(" the") == ready
        assert stream.flush() == (["the"] if fast else ["Sure, the"])
    finally:
        speaker.shutdown()
