"""In-process pieces of the server: model specs, streaming encoders, the app on a test client."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
from audio_check import decode_aac
from fastapi.testclient import TestClient
from tone_model import ToneModel

from ggtts.audio import Audio, encoded_rate, resample
from ggtts.errors import GGTTSError, InputError
from ggtts.families.base import Capabilities, Family, VoiceMix
from ggtts.runtime.cancel import check_cancelled
from ggtts.server import model_names, parse_model_spec, speaking
from ggtts.server.app import create_app
from ggtts.server.errors import ApiError
from ggtts.server.settings import ServerSettings
from ggtts.server.streaming import drop_mp3_placeholder, mp3_frame_length, stream_encoder
from ggtts.server.worker import Deadline, RequestTimeout, Steps
from time_limit import wait_for


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("kokoro", ("kokoro", "kokoro")),
        ("models/my-voice.gguf", ("my-voice", "models/my-voice.gguf")),
        ("fast=models/a.gguf", ("fast", "models/a.gguf")),
        ("x = /tmp/b=c.gguf", ("x", "/tmp/b=c.gguf")),
    ],
)
def test_model_specs(spec: str, expected: tuple[str, str]) -> None:
    assert parse_model_spec(spec) == expected


def test_model_names_default_and_duplicates() -> None:
    assert model_names([]) == [("kokoro", "kokoro")]
    with pytest.raises(GGTTSError, match="two models are named 'a'"):
        model_names(["a=x.gguf", "dir/a.gguf"])
    with pytest.raises(GGTTSError, match="NAME=PATH"):
        parse_model_spec("=x.gguf")


@pytest.mark.parametrize("fmt", ["wav", "pcm", "mp3", "opus", "aac"])
@pytest.mark.parametrize("rate", [16000, 22050, 24000])
def test_stream_encoders_decode_to_the_whole(fmt: str, rate: int) -> None:
    """Every streamed format decodes to the audio fed; Opus at a rate it does not encode (Piper's and Magpie's
    22,050 Hz) comes at 48 kHz, resampled on the way as the whole file is."""
    model = ToneModel(sample_rate=rate)
    chunks = [model.chunk(i, "low", 1.0) for i in range(5)]
    encoder = stream_encoder(fmt, rate)
    data = encoder.start() + b"".join(encoder.feed(c) for c in chunks) + encoder.finish()
    expected = Audio.concatenate(chunks).samples
    if fmt == "opus":
        rate = encoded_rate("opus", rate)
        expected = resample(expected, model.sample_rate, rate)
        samples, got_rate = sf.read(io.BytesIO(data), dtype="float32")
        whole, _ = sf.read(io.BytesIO(Audio.concatenate(chunks).encode("opus")), dtype="float32")
        assert got_rate == rate and samples.shape == whole.shape  # the stream, and the whole file
    if fmt == "pcm":
        samples = np.frombuffer(data, "<i2") / 32768
    elif fmt == "aac":
        samples, got_rate = decode_aac(data)
        assert got_rate == rate
    else:
        samples, got_rate = sf.read(io.BytesIO(data), dtype="float32")
        assert got_rate == rate
    if fmt in ("wav", "pcm"):
        np.testing.assert_allclose(samples, expected, atol=2 / 32768)
    else:  # lossy: encoder delay and padding, but never a length read from an empty header
        assert len(expected) <= len(samples) <= len(expected) + 4096
        assert np.sqrt(np.mean(np.square(samples))) > 0.1  # the tone, not silence


@pytest.mark.parametrize("fmt", ["wav", "flac"])
def test_a_whole_file_holds_the_samples_a_stream_sends(fmt: str) -> None:
    """16-bit WAV and FLAC files hold exactly the integers of the pcm stream (libsndfile's own scaling of float
    samples rounded 457 of 720 samples of a request 1 LSB the other way)."""
    x = (np.random.default_rng(0).standard_normal(4000) * 0.3).astype(np.float32)
    audio = Audio(x, 24000)
    whole, _ = sf.read(io.BytesIO(audio.encode(fmt)), dtype="int16")
    assert np.array_equal(whole, np.frombuffer(audio.pcm16(), "<i2"))


def test_mp3_placeholder_frame_is_dropped() -> None:
    header = bytes([0xFF, 0xF3, 0x84, 0xC4])  # MPEG-2 layer III, 64 kbit/s, 24 kHz: 192-byte frames
    assert mp3_frame_length(header) == 192
    placeholder = header + bytes(188)
    real = header + bytes([1]) * 188
    assert drop_mp3_placeholder(placeholder + real) == real
    assert drop_mp3_placeholder(real + real) == real + real
    assert mp3_frame_length(b"ID3\x04") is None


def test_flac_cannot_be_streamed() -> None:
    with pytest.raises(ValueError, match="cannot be streamed"):
        stream_encoder("flac", 24000)


def test_settings_are_checked() -> None:
    with pytest.raises(InputError, match="max_queue"):
        ServerSettings(max_queue=-1)
    with pytest.raises(InputError, match="max_input_chars"):
        ServerSettings(max_input_chars=0)
    with pytest.raises(InputError, match="timeout_s"):
        ServerSettings(timeout_s=0)
    with pytest.raises(InputError, match="send_timeout_s"):
        ServerSettings(send_timeout_s=float("nan"))
    with pytest.raises(InputError, match="request_timeout_s"):
        ServerSettings(request_timeout_s=-1)
    with pytest.raises(InputError, match="max_connections"):
        ServerSettings(max_connections=0)
    with pytest.raises(InputError, match="idle_grace_s"):
        ServerSettings(idle_grace_s=float("nan"))
    assert ServerSettings(idle_grace_s=0).idle_grace_s == 0  # any idle connection makes room at once
    assert ServerSettings(api_key="").api_key is None


def test_the_time_limit_counts_only_the_servers_own_work() -> None:
    """Time between waits (a client reading a stream) is not charged; a wait past what is left is a 504."""

    async def run() -> None:
        deadline = Deadline(1.0)
        for _ in range(3):  # 0.06 s of waits, with 1.5 s of a slow client's reading between them: within 1 s
            await deadline.wait(asyncio.ensure_future(asyncio.sleep(0.02)))
            await asyncio.sleep(0.5)
        assert deadline.spent >= 0.06
        with pytest.raises(RequestTimeout):
            await deadline.wait(asyncio.ensure_future(asyncio.sleep(60)))

    asyncio.run(run())


def test_app_without_key_is_open_and_rejects_other_rates() -> None:
    app = create_app({"t": ToneModel(sample_rate=17000)}, ServerSettings())
    with TestClient(app) as client:
        assert client.get("/v1/models").status_code == 200
        response = client.post("/v1/audio/speech", json={"input": "a b", "response_format": "mp3"})
        assert response.status_code == 400
        assert "17000 Hz" in response.json()["error"]["message"]
        assert client.post("/v1/audio/speech", json={"input": "a b", "response_format": "wav"}).status_code == 200


@pytest.mark.parametrize("stream", [True, False])
def test_opus_of_a_22050_hz_model_comes_at_48_khz(stream: bool) -> None:
    app = create_app({"t": ToneModel(sample_rate=22050)}, ServerSettings())
    with TestClient(app) as client:
        body = {"input": "a b", "response_format": "opus", "stream": stream}
        response = client.post("/v1/audio/speech", json=body)
        assert response.status_code == 200
        samples, rate = sf.read(io.BytesIO(response.content), dtype="float32")
        assert rate == 48000 and np.sqrt(np.mean(np.square(samples))) > 0.1
        assert response.headers["X-Sample-Rate"] == "48000"  # the rate sent, not the model's


@dataclasses.dataclass(frozen=True)
class _NoOptions:
    pass


class _FixedSpeedTones(ToneModel):
    """A tone model of a family with no speed control and a 20-character limit, counting its streams."""

    streams = 0

    def stream(self, text: str, voice: str | None = None, speed: float = 1.0, **options: Any) -> Iterator[Audio]:
        type(self).streams += 1
        return super().stream(text, voice, speed, **options)


_FixedSpeedTones.family = Family(
    name="fixed",
    description="tones at one speed",
    architectures=("test-fixed",),
    pipeline=_FixedSpeedTones,
    options=_NoOptions,
    capabilities=Capabilities(speed=(1.0, 1.0), max_input_chars=20),
)


@pytest.mark.parametrize(
    ("body", "status", "param", "message"),
    [
        ({"input": "a b", "speed": 1.5}, 400, "speed", "fixed has no speed control; use speed 1"),
        ({"input": "word " * 5}, 413, "input", "input is 25 characters long; fixed takes at most 20"),
    ],
)
def test_what_the_family_always_refuses_is_refused_before_the_request_waits(
    body: dict[str, Any], status: int, param: str, message: str
) -> None:
    """Refused in the route's checks, before the model's queue (a busy server answered 503 or 504 first)."""
    app = create_app({"t": _FixedSpeedTones()}, ServerSettings())
    with TestClient(app) as client:
        before = _FixedSpeedTones.streams
        response = client.post("/v1/audio/speech", json=body)
        error = response.json()["error"]
        assert response.status_code == status and error["param"] == param and message in error["message"]
        assert _FixedSpeedTones.streams == before
        assert client.post("/v1/audio/speech", json={"input": "a b"}).status_code == 200


def test_the_chat_path_takes_a_large_body_only_where_a_model_answers_questions() -> None:
    """A server whose models only speak keeps the speech routes' limit on /v1/chat/completions too: 413, not a
    48 MiB body read to be refused."""
    app = create_app({"t": ToneModel()}, ServerSettings())
    body = {"model": "t", "messages": [{"role": "user", "content": "x" * 200_000}]}
    with TestClient(app) as client:
        response = client.post("/v1/chat/completions", json=body)
        assert response.status_code == 413 and "characters of input" in response.json()["error"]["message"]
        small = client.post("/v1/chat/completions", json={"model": "t", "messages": [{"role": "user", "content": "a"}]})
        assert small.status_code == 400 and "does not answer questions" in small.json()["error"]["message"]


def test_create_app_needs_a_model() -> None:
    with pytest.raises(ValueError, match="at least one model"):
        create_app({})


SPEECH = "/v1/audio/speech"


def test_a_failing_stream_encoder_gives_its_queue_place_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no queue, one lost place would leave every later request at 503."""

    def broken_encoder(fmt: str, sample_rate: int) -> object:
        raise OSError("the encoder library is broken")

    app = create_app({"t": ToneModel()}, ServerSettings(max_queue=0))
    body = {"input": "a b", "response_format": "mp3", "stream": True}
    with TestClient(app) as client:
        monkeypatch.setattr(speaking, "stream_encoder", broken_encoder)
        for _ in range(3):
            response = client.post(SPEECH, json=body)
            assert response.status_code == 500
            error = response.json()["error"]
            assert error["code"] == "encoder_failed"
            assert "mp3" in error["message"] and "OSError" in error["message"]
        assert client.get("/health").json()["models"]["t"] == {"busy": False, "waiting": 0}
        monkeypatch.undo()
        assert client.post(SPEECH, json=body).status_code == 200
        # the stream's last bytes can reach the client before the worker has let go of the model: with no queue, a
        # request then would be a 503 (on a busy machine it was); the next one waits for the place to be given back
        wait_for(lambda: not client.get("/health").json()["models"]["t"]["busy"], "the worker's place given back")
        assert client.post(SPEECH, json={**body, "stream": False}).status_code == 200


def test_voice_names_in_a_blend_are_checked_before_the_model_sees_them() -> None:
    seen: list[object] = []

    class Recording(ToneModel):
        def stream(self, text, voice=None, speed=1.0, **options):  # type: ignore[no-untyped-def]
            seen.append(voice)
            return super().stream(text, voice=voice, speed=speed)

    app = create_app({"t": Recording()}, ServerSettings())
    with TestClient(app) as client:
        for voice, fragment in [
            ("x:/etc/passwd", "voice 'x'"),
            ("nobody:1", "voice 'nobody'"),
            ("low:/etc/foo.json", "weight '/etc/foo.json'"),
            ("low:0.5,high:-1", "weight '-1'"),
            ("low:0.5,high:nan", "weight 'nan'"),
            ("low,/etc/foo.json", "voice '/etc/foo.json'"),
            ("", "voice ''"),
        ]:
            response = client.post(SPEECH, json={"input": "a b", "voice": voice})
            assert response.status_code == 400, voice
            error = response.json()["error"]
            assert error["param"] == "voice"
            assert fragment in error["message"], error
            if error["code"] == "voice_not_found":
                assert "choose one of: low, high" in error["message"]
        assert seen == []
        assert client.post(SPEECH, json={"input": "a b", "voice": " high : 2 "}).status_code == 200
        assert seen == [VoiceMix((("high", 1.0),))]  # resolved once: the model takes it as it is


def test_serve_refuses_bad_limits_in_one_line() -> None:
    ggtts = Path(sys.executable).parent / "ggtts"
    for option, value, name in [("--max-queue", "-1", "max_queue"), ("--timeout", "0", "timeout_s"),
                                ("--replicas", "0", "replicas")]:  # fmt: skip
        done = subprocess.run([str(ggtts), "serve", option, value], capture_output=True, text=True, timeout=60)
        assert done.returncode != 0
        assert done.stdout == ""
        lines = done.stderr.splitlines()
        assert len(lines) == 1, done.stderr
        assert name in lines[0] and "internal error" not in lines[0] and "Traceback" not in done.stderr


@pytest.mark.parametrize("command", ["serve", "wyoming"])
def test_bad_limits_are_told_before_the_device_is_chosen(
    command: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Choosing the device loads torch (seconds): a mistake in the limits is told first."""
    from ggtts import cli
    from ggtts.runtime import device

    def chosen(asked: str | None) -> str:
        pytest.fail("the device was chosen before the limits were checked")

    monkeypatch.setattr(device, "resolve_device", chosen)
    assert cli.main([command, "--max-queue", "-1"]) == 1
    assert "max_queue must be 0 or more" in capsys.readouterr().err


class MeetingModel(ToneModel):
    """A tone model whose synthesis starts only once every copy sharing its barrier has started one: two requests
    pass only if they run at the same time (a broken build is stopped by the barrier's timeout)."""

    def __init__(self, barrier: threading.Barrier) -> None:
        super().__init__()
        self.barrier, self.timeout = barrier, BARRIER_S

    def stream(self, text: str, voice: str | None = None, speed: float = 1.0, **options: Any) -> Iterator[Audio]:
        self.barrier.wait(timeout=self.timeout)
        yield from super().stream(text, voice, speed, **options)


BARRIER_S = 120.0  # only bounds a run where the requests do not meet
CLOSED_S = 30.0  # only bounds a run where a stream is never closed


@pytest.mark.parametrize("replicas", [2, 1])
def test_replicas_serve_requests_at_once(replicas: int) -> None:
    """Two copies of a model take two requests at the same time; one copy takes them in turn (the first request
    then waits at the barrier for a second that cannot start: seen failing, as it must)."""
    barrier = threading.Barrier(2)
    copies = [MeetingModel(barrier) for _ in range(replicas)]
    app = create_app({"t": copies}, ServerSettings())
    with TestClient(app) as client:
        if replicas == 1:  # one copy: the second request cannot start while the first waits; no need to wait long
            copies[0].timeout = 0.5
        with ThreadPoolExecutor(2) as pool:
            statuses = list(pool.map(lambda w: client.post(SPEECH, json={"input": w}).status_code, ["a", "b"]))
        assert statuses == ([200, 200] if replicas == 2 else [500, 500])
        assert client.get("/health").json()["models"]["t"] == {"busy": False, "waiting": 0}
        assert [m["id"] for m in client.get("/v1/models").json()["data"]] == ["t"]


class ParallelMeetingModel(MeetingModel):
    """One model that decodes two streams at once (as OuteTTS with ``parallel=2``)."""

    @property
    def parallel_streams(self) -> int:
        return 2


def test_a_model_of_parallel_streams_serves_them_at_once() -> None:
    """One model that decodes two streams together takes two requests at the same time (one that does not: the
    replicas test's single copy, [500, 500]); a third finds the queue full."""
    model = ParallelMeetingModel(threading.Barrier(2))
    app = create_app({"t": model}, ServerSettings(max_queue=0))
    with TestClient(app) as client:
        with ThreadPoolExecutor(2) as pool:
            statuses = list(pool.map(lambda w: client.post(SPEECH, json={"input": w}).status_code, ["a", "b"]))
        assert statuses == [200, 200]
        assert client.get("/health").json()["models"]["t"] == {"busy": False, "waiting": 0}
    speaker = speaking.Speaker({"t": model}, ServerSettings(max_queue=0))
    worker = speaker.workers["t"]
    first, second = worker.admit(), worker.admit()
    with pytest.raises(ApiError, match="busy") as busy:
        worker.admit()
    assert busy.value.status == 503 and worker.waiting == 0
    for ticket in (first, second):
        worker._done(ticket, None)
    speaker.shutdown()


class _OtherVoices(ToneModel):
    @property
    def voices(self) -> list[str]:
        return ["alto"]

    def stream(self, text: str, voice: str | None = None, speed: float = 1.0, **options: Any) -> Iterator[Audio]:
        return super().stream(text, "high", speed, **options)


def test_openais_model_names_take_a_voice_to_the_model_that_has_it() -> None:
    """Open WebUI lists every model's voices and sends its choice with OpenAI's model name: a voice of another
    served model goes to that model; a named model, or a voice the default model has, stays where it is asked."""
    app = create_app({"t": ToneModel(), "o": _OtherVoices()}, ServerSettings())
    with TestClient(app) as client:

        def pcm(body: dict[str, Any]) -> bytes:
            response = client.post(SPEECH, json={"input": "one two", "response_format": "pcm", **body})
            assert response.status_code == 200, response.text
            return response.content

        alto = pcm({"model": "o", "voice": "alto"})
        assert pcm({"model": "tts-1", "voice": "alto"}) == alto == pcm({"voice": "alto"})
        assert pcm({"model": "tts-1", "voice": "low"}) == pcm({"model": "t", "voice": "low"}) != alto
        refused = client.post(SPEECH, json={"input": "one", "model": "t", "voice": "alto"})
        assert refused.status_code == 400 and "not available for model 't'" in refused.text


def test_a_request_goes_to_the_least_loaded_copy() -> None:
    speaker = speaking.Speaker({"t": [ToneModel(), ToneModel()], "u": ToneModel()}, ServerSettings(max_queue=0))
    first, second = speaker.replicas["t"]
    assert speaker.workers["t"] is first and len(speaker.replicas["u"]) == 1
    assert speaker.worker_for("t") is first
    ticket = first.admit()
    assert speaker.worker_for("t") is second
    second.admit()
    assert speaker.worker_for("t") is first  # both hold one: the first
    ticket.worker._done(ticket, None)
    assert speaker.worker_for("t") is first and speaker.health("t") == (False, 0)
    speaker.shutdown()
    with pytest.raises(InputError, match="replicas must be at least 1"):
        ServerSettings(replicas=0)
    with pytest.raises(ValueError, match="model 't' has no copy to serve"):
        speaking.Speaker({"t": []}, ServerSettings())


def test_load_models_loads_and_warms_each_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    import ggtts.api
    from ggtts.server import load_models

    made: list[ToneModel] = []
    warmed: list[ToneModel] = []

    def load(source: str | None, **options: Any) -> ToneModel:
        made.append(ToneModel())
        made[-1].warm_up = lambda m=made[-1]: warmed.append(m)  # type: ignore[method-assign]
        return made[-1]

    monkeypatch.setattr(ggtts.api, "load", load)
    models = load_models(["a=x.gguf", "b=y.gguf"], replicas=3)
    assert {n: len(c) for n, c in models.items()} == {"a": 3, "b": 3}
    assert made == warmed and len({id(m) for m in made}) == 6


def test_serve_help_lists_the_server_options() -> None:
    ggtts = Path(sys.executable).parent / "ggtts"
    done = subprocess.run([str(ggtts), "serve", "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    for option in ["--model", "--host", "--port", "--api-key", "--max-queue", "--max-input-chars", "--timeout",
                   "--replicas"]:  # fmt: skip
        assert option in done.stdout
    assert "(default 16)" in done.stdout


def test_volume_clips_and_stops_the_model_when_closed() -> None:
    closed: list[str] = []

    def chunks() -> Iterator[Audio]:
        try:
            yield Audio(np.array([0.3, -0.3, 0.05], dtype=np.float32), 24000, offset=0.0)
            yield Audio(np.array([0.2], dtype=np.float32), 24000, offset=0.5)
        finally:
            closed.append("model")

    model = chunks()
    louder = speaking.at_volume(model, 10.0)
    first = next(louder)
    np.testing.assert_allclose(first.samples, [1.0, -1.0, 0.5])  # clipped to [-1, 1]
    assert first.offset == 0.0 and first.sample_rate == 24000
    louder.close()  # as the worker does when the client leaves
    assert closed == ["model"]


def test_live_close_codes_say_what_happened() -> None:
    from ggtts.server.errors import ApiError
    from ggtts.server.live import _close_code

    assert _close_code(ApiError(400, "bad", code="invalid_message")) == 1008
    assert _close_code(ApiError(503, "busy", code="queue_full")) == 1013  # try again later
    assert _close_code(ApiError(500, "failed", code="synthesis_failed")) == 1011


def test_closing_a_stream_of_a_model_of_several_turns_waits_for_its_running_step(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """With several turns a stream's cleanup runs on another thread of the model's pool than its step: it waits for
    the step (which the cancelled token ends) and then closes the iterator, with nothing logged as failed (without
    the wait: "generator already executing")."""
    model = ParallelMeetingModel(threading.Barrier(1))
    worker = speaking.Speaker({"t": model}, ServerSettings()).workers["t"]
    started, finished = threading.Event(), threading.Event()

    def waits_until_cancelled() -> Iterator[int]:
        try:
            started.set()
            while True:
                check_cancelled()
                threading.Event().wait(0.01)
                yield 0
        finally:
            finished.set()

    async def scenario() -> None:
        ticket = worker.admit()
        await ticket.take_turn(Deadline(60))
        steps = Steps(ticket, waits_until_cancelled, Deadline(60))
        running = asyncio.ensure_future(steps.next())
        await asyncio.get_running_loop().run_in_executor(None, started.wait, CLOSED_S)
        steps.close()
        # (a bound for a broken build only: there the iterator is never closed)
        await asyncio.get_running_loop().run_in_executor(None, finished.wait, CLOSED_S)
        running.cancel()

    with caplog.at_level("ERROR", logger="ggtts.server"):
        asyncio.run(scenario())
    assert finished.is_set()
    assert not [r for r in caplog.records if "cleaning up" in r.getMessage()]
    worker.shutdown()
