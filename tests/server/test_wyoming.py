"""The Wyoming server (Home Assistant's protocol) through the ``wyoming`` library's own ``AsyncTcpClient``: describe,
synthesize, streaming synthesize, program and voice choice, bad requests; and the real ``ggtts wyoming`` command
on a tiny random Kokoro, whose audio must be what the HTTP server gives for the same text."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import numpy as np
import pytest
from audio_check import decode
from server_support import STARTUP_TIMEOUT_S, Server, free_port, open_sockets, settled_sockets
from test_faults import wait_until
from tone_model import ToneModel

pytest.importorskip("wyoming")
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.error import Error
from wyoming.event import async_read_event, async_write_event, write_event
from wyoming.info import Describe, Info, SelectProgram
from wyoming.tts import (
    Synthesize,
    SynthesizeChunk,
    SynthesizeStart,
    SynthesizeStop,
    SynthesizeStopped,
    SynthesizeVoice,
)

from ggtts.server.settings import ServerSettings
from ggtts.server.speaking import Speaker
from ggtts.server.wyoming import SAMPLES_PER_CHUNK, run_server

READ_TIMEOUT_S = 60.0  # only catches a hang


def _serve_in_thread(models: dict[str, Any], settings: ServerSettings) -> Iterator[tuple[int, Speaker]]:
    """A Wyoming server on ``models``, in a thread of this process, until the generator is closed."""
    port = free_port()
    speaker = Speaker(models, settings)
    loop = asyncio.new_event_loop()
    ready = threading.Event()

    async def serve() -> None:
        started = asyncio.Event()
        task = asyncio.ensure_future(run_server(f"tcp://127.0.0.1:{port}", speaker, started))
        await started.wait()
        loop.call_soon_threadsafe(ready.set)
        await task

    def run() -> None:
        with contextlib.suppress(asyncio.CancelledError):  # how the server is stopped below
            loop.run_until_complete(serve())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(READ_TIMEOUT_S)
    _wait_for_port(port)
    yield port, speaker
    loop.call_soon_threadsafe(lambda: [t.cancel() for t in asyncio.all_tasks(loop)])
    thread.join(10)


@pytest.fixture(scope="module")
def tone_port() -> Iterator[int]:
    """A Wyoming server on tone models."""
    models = {"tone": ToneModel(), "slow": ToneModel(delay_s=0.3), "tone16k": ToneModel(sample_rate=16000)}
    for port, _ in _serve_in_thread(models, ServerSettings(max_queue=1, max_input_chars=200, timeout_s=30)):
        yield port


def _wait_for_port(port: int, process: subprocess.Popen[bytes] | None = None) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"ggtts wyoming exited with {process.returncode}")
        try:
            asyncio.run(_describe(port))
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"no Wyoming server on port {port} after {STARTUP_TIMEOUT_S} s")


async def _describe(port: int) -> Info:
    async with AsyncTcpClient("127.0.0.1", port) as client:
        await client.write_event(Describe().event())
        event = await asyncio.wait_for(client.read_event(), READ_TIMEOUT_S)
        assert event is not None and Info.is_type(event.type)
        return Info.from_event(event)


async def _read_until(client: AsyncTcpClient, end: type) -> tuple[list[Any], bytes]:
    """The events up to ``end`` (AudioStop or SynthesizeStopped) or an error, and the audio they carried."""
    events: list[Any] = []
    audio = b""
    while True:
        event = await asyncio.wait_for(client.read_event(), READ_TIMEOUT_S)
        assert event is not None, "the server closed the connection"
        events.append(event)
        if AudioChunk.is_type(event.type):
            chunk = AudioChunk.from_event(event)
            assert len(chunk.audio) <= SAMPLES_PER_CHUNK * 2
            audio += chunk.audio
        if end.is_type(event.type) or Error.is_type(event.type):
            return events, audio


async def _sure_then_the_rest(port: int, voice: str) -> tuple[list[Any], bytes, bytes]:
    """A voice agent's streaming synthesis: "Sure," and " the" sent, the events and audio read up to the first
    ``audio-stop`` (a server that waits for more text never sends one), then the rest of the sentence and the stop:
    (the first cycle's events, its audio, the audio after it)."""
    async with AsyncTcpClient("127.0.0.1", port) as client:
        await client.write_event(SynthesizeStart(voice=SynthesizeVoice(name=voice)).event())
        for piece in ["Sure,", " the"]:
            await client.write_event(SynthesizeChunk(piece).event())
        first, first_audio = await _read_until(client, AudioStop)  # only "Sure, the" was sent
        await client.write_event(SynthesizeChunk(" forecast looks good.").event())
        await client.write_event(SynthesizeStop().event())
        _, rest_audio = await _read_until(client, SynthesizeStopped)
        return first, first_audio, rest_audio


def _types(events: list[Any]) -> list[str]:
    """The event types, runs of audio-chunk folded into one."""
    folded: list[str] = []
    for event in events:
        if not (event.type == "audio-chunk" and folded and folded[-1] == "audio-chunk"):
            folded.append(event.type)
    return folded


def _tone(stretches: list[str], voice: str = "low", rate: int = 24000) -> np.ndarray:
    model = ToneModel(sample_rate=rate)
    return np.concatenate([model.expected(s, voice) for s in stretches])


def test_describe_lists_every_model_as_a_program(tone_port: int) -> None:
    """Each model a program, after one of them all (Home Assistant uses the first); a voice name the models share
    is listed there once, as a synthesize naming it goes to the first model with it."""
    info = asyncio.run(_describe(tone_port))
    assert [p.name for p in info.tts] == ["ggtts", "tone", "slow", "tone16k"]
    assert all(p.installed and p.supports_synthesize_streaming for p in info.tts)
    assert all([v.name for v in p.voices] == ["low", "high"] for p in info.tts)
    assert [v.description for v in info.tts[0].voices] == ["low · tone", "high · tone"]
    assert info.tts[0].description.startswith("every model served: tone, slow, tone16k")


def _home_assistant_view(info: Info) -> tuple[str, dict[str, list[str]]]:
    """What Home Assistant's Wyoming TTS entity offers (homeassistant/components/wyoming/tts.py): the first
    installed program, and its installed voices under each of their languages (a voice without one is not listed)."""
    program = next(p for p in info.tts if p.installed)
    voices: dict[str, list[str]] = {}
    for voice in program.voices:
        for language in voice.languages if voice.installed else []:
            voices.setdefault(language, []).append(voice.name)
    return program.name, voices


@pytest.fixture(scope="module")
def tone_and_kokoro(kokoro_gguf: Path) -> Iterator[tuple[int, Speaker]]:
    import ggtts

    models = {"tone": ToneModel(), "tiny": ggtts.load(kokoro_gguf)}
    yield from _serve_in_thread(models, ServerSettings(max_queue=1, max_input_chars=200, timeout_s=30))


def test_home_assistant_sees_every_model_and_reaches_each(tone_and_kokoro: tuple[int, Speaker]) -> None:
    """Home Assistant lists the first program's voices by language and synthesizes with a voice name alone: every
    served model's voices are there (the tone model says no language: not listed), and each name reaches its model.
    A Kokoro voice reads English as its file says, and Japanese text (its voices' names say nothing here)."""
    port, _ = tone_and_kokoro

    async def speak(*events: Any) -> bytes:
        async with AsyncTcpClient("127.0.0.1", port) as client:
            for event in events:
                await client.write_event(event.event())
            return (await _read_until(client, AudioStop))[1]

    from ggtts.text.japanese import japanese_installed

    name, voices = _home_assistant_view(asyncio.run(_describe(port)))
    japanese = {"ja": ["v_one", "v_two"]} if japanese_installed() else {}  # Japanese text read where the extra is
    assert (name, voices) == ("ggtts", {"en_US": ["v_one", "v_two"], **japanese})
    by_name = asyncio.run(speak(Synthesize("Hello there.", voice=SynthesizeVoice(name="v_two"))))
    chosen = asyncio.run(
        speak(SelectProgram(name="tiny"), Synthesize("Hello there.", voice=SynthesizeVoice(name="v_two")))
    )
    assert len(by_name) > 4000 and by_name == chosen
    by_language = asyncio.run(speak(Synthesize("Hello there.", voice=SynthesizeVoice(language="en-US"))))
    assert by_language == asyncio.run(speak(SelectProgram(name="tiny"), Synthesize("Hello there.")))  # v_one
    tone = asyncio.run(speak(SelectProgram(name="ggtts"), Synthesize("one two", voice=SynthesizeVoice(name="high"))))
    np.testing.assert_allclose(decode(tone, "pcm", 24000)[0], _tone(["one two"], "high"), atol=2 / 32768)


def test_synthesize_sends_the_audio_in_one_cycle(tone_port: int) -> None:
    async def run() -> tuple[list[Any], bytes]:
        async with AsyncTcpClient("127.0.0.1", tone_port) as client:
            await client.write_event(Synthesize("one two three", voice=SynthesizeVoice(name="high")).event())
            return await _read_until(client, AudioStop)

    events, audio = asyncio.run(run())
    assert _types(events) == ["audio-start", "audio-chunk", "audio-stop"]
    start = AudioStart.from_event(events[0])
    assert (start.rate, start.width, start.channels) == (24000, 2, 1)
    samples, _ = decode(audio, "pcm", 24000)
    np.testing.assert_allclose(samples, _tone(["one two three"], "high"), atol=2 / 32768)


def test_streaming_synthesis_speaks_each_stretch_as_it_completes(tone_port: int) -> None:
    """Home Assistant's streaming flow: the first clause's audio comes back before the rest of the text is sent
    (an order of events, not a time); the ``synthesize`` sent for older servers is not spoken twice."""
    pieces = ["early bird", " sings, and", " then it", " rests. The", " end."]

    async def run() -> tuple[list[Any], bytes, list[Any], bytes]:
        async with AsyncTcpClient("127.0.0.1", tone_port) as client:
            await client.write_event(SelectProgram(name="slow").event())
            await client.write_event(SynthesizeStart(voice=SynthesizeVoice(name="low")).event())
            for piece in pieces[:2]:
                await client.write_event(SynthesizeChunk(piece).event())
            first, first_audio = await _read_until(client, AudioStop)  # only the first clause was sent
            for piece in pieces[2:]:
                await client.write_event(SynthesizeChunk(piece).event())
            await client.write_event(Synthesize("".join(pieces)).event())
            await client.write_event(SynthesizeStop().event())
            rest, rest_audio = await _read_until(client, SynthesizeStopped)
            return first, first_audio, rest, rest_audio

    first, first_audio, rest, rest_audio = asyncio.run(run())
    assert _types(first) == ["audio-start", "audio-chunk", "audio-stop"]
    assert _types(rest) == ["audio-start", "audio-chunk", "audio-stop"] * 2 + ["synthesize-stopped"]
    samples, _ = decode(first_audio + rest_audio, "pcm", 24000)
    expected = _tone(["early bird sings,", "and then it rests.", "The end."])
    np.testing.assert_allclose(samples, expected, atol=2 / 32768)


def test_fast_start_speaks_a_one_word_first_clause_at_once() -> None:
    """With the server's fast start a first clause of one word ("Sure,") is a stretch of its own, spoken before the
    rest of its sentence is sent (without it, the first stretch waits for three words: the test above)."""

    served = _serve_in_thread({"tone": ToneModel()}, ServerSettings(fast_start=True))
    port, _ = next(served)
    try:
        first, first_audio, rest_audio = asyncio.run(_sure_then_the_rest(port, "low"))
    finally:
        served.close()
    assert _types(first) == ["audio-start", "audio-chunk", "audio-stop"]
    np.testing.assert_allclose(decode(first_audio, "pcm", 24000)[0], _tone(["Sure,"]), atol=2 / 32768)
    np.testing.assert_allclose(decode(rest_audio, "pcm", 24000)[0], _tone(["the forecast looks good."]), atol=2 / 32768)


def test_program_and_voice_choice(tone_port: int) -> None:
    async def run() -> tuple[int, bytes]:
        async with AsyncTcpClient("127.0.0.1", tone_port) as client:
            await client.write_event(SelectProgram(name="tone16k").event())
            await client.write_event(Synthesize("one two", voice=SynthesizeVoice(name="high")).event())
            events, audio = await _read_until(client, AudioStop)
            return AudioStart.from_event(events[0]).rate, audio

    rate, audio = asyncio.run(run())
    assert rate == 16000
    samples, _ = decode(audio, "pcm", 16000)
    np.testing.assert_allclose(samples, _tone(["one two"], "high", 16000), atol=2 / 32768)


@pytest.mark.parametrize(
    ("events", "code"),
    [
        ([Synthesize("one", voice=SynthesizeVoice(name="nobody"))], "voice_not_found"),
        ([Synthesize("   ")], "empty_input"),
        ([Synthesize("x" * 201)], "input_too_long"),
        ([Synthesize("BADINPUT one")], "invalid_input"),  # before any audio (after it: the close, tested below)
        ([Synthesize("FAIL one")], "synthesis_failed"),
        ([SelectProgram(name="nope")], "model_not_found"),
        ([SynthesizeChunk("stray text")], "bad_event"),
        ([SynthesizeStop()], "bad_event"),
    ],
)
def test_bad_requests_get_one_error_and_the_connection_goes_on(tone_port: int, events: list[Any], code: str) -> None:
    async def run() -> tuple[list[Any], bytes]:
        async with AsyncTcpClient("127.0.0.1", tone_port) as client:
            for event in events:
                await client.write_event(event.event())
            error = await asyncio.wait_for(client.read_event(), READ_TIMEOUT_S)
            while error is not None and not Error.is_type(error.type):  # audio of a chunk before a failure
                error = await asyncio.wait_for(client.read_event(), READ_TIMEOUT_S)
            assert error is not None
            await client.write_event(Synthesize("still here").event())
            after, audio = await _read_until(client, AudioStop)
            return [Error.from_event(error), *after], audio

    (error, *after), audio = asyncio.run(run())
    assert error.code == code, error.text
    assert _types(after) == ["audio-start", "audio-chunk", "audio-stop"]
    samples, _ = decode(audio, "pcm", 24000)
    np.testing.assert_allclose(samples, _tone(["still here"]), atol=2 / 32768)


def test_ggtts_wyoming_serves_kokoro_as_the_http_server_does(
    kokoro_gguf: Path, kokoro_server: Server, tmp_path: Path
) -> None:
    """The same samples as the HTTP server; and in streaming synthesis Kokoro's first clause, however short, is
    spoken as soon as it is complete (its own stream would speak it alone anyway), before the rest is sent."""
    port = free_port()
    log = (tmp_path / "wyoming.log").open("wb")
    ggtts = str(Path(sys.executable).parent / "ggtts")
    cmd = [ggtts, "wyoming", "-m", f"tiny={kokoro_gguf}", "--uri", f"tcp://127.0.0.1:{port}"]
    process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    text = "Hello from Home Assistant. It works."
    try:
        _wait_for_port(port, process)
        info = asyncio.run(_describe(port))

        async def run() -> tuple[list[Any], bytes]:
            async with AsyncTcpClient("127.0.0.1", port) as client:
                await client.write_event(Synthesize(text, voice=SynthesizeVoice(name="v_two")).event())
                return await _read_until(client, AudioStop)

        events, audio = asyncio.run(run())
        first_events, first_audio, _ = asyncio.run(_sure_then_the_rest(port, "v_two"))
    finally:
        process.terminate()
        process.wait(30)
    assert [p.name for p in info.tts] == ["tiny"] and [v.name for v in info.tts[0].voices] == ["v_one", "v_two"]
    assert AudioStart.from_event(events[0]).rate == 24000
    url = kokoro_server.url + "/v1/audio/speech"
    body = {"model": "tiny", "input": text, "voice": "v_two", "response_format": "pcm"}
    http = httpx.post(url, json=body, timeout=READ_TIMEOUT_S)
    assert http.status_code == 200 and len(audio) > 4000
    assert audio == http.content  # the same model, text and voice: the same samples
    assert _types(first_events) == ["audio-start", "audio-chunk", "audio-stop"]
    sure = httpx.post(url, json={**body, "input": "Sure,"}, timeout=READ_TIMEOUT_S)
    assert sure.status_code == 200 and len(first_audio) > 2000 and first_audio == sure.content


def test_an_event_announcing_a_huge_body_ends_the_connection_unread(tone_port: int) -> None:
    """A header that says 100 MB of data follow is refused before anything is read into memory: the server
    closes that connection and goes on serving others."""

    async def run() -> bytes:
        reader, writer = await asyncio.open_connection("127.0.0.1", tone_port)
        writer.write(b'{"type": "synthesize", "data_length": 100000000}\n' + b"x" * 1000)
        await writer.drain()
        rest = await asyncio.wait_for(reader.read(), READ_TIMEOUT_S)  # b"" once the server closes
        writer.close()
        return rest

    assert asyncio.run(run()) == b""
    assert asyncio.run(_describe(tone_port)).tts[1].name == "tone"


def test_a_client_gone_inside_an_events_data_is_a_quiet_close(tone_port: int, caplog: pytest.LogCaptureFixture) -> None:
    """A header announcing data, a byte of it, then the client hangs up: the connection ends without a traceback in
    the log (an IncompleteReadError once escaped the handler: "Task exception was never retrieved", found by
    benchmarks/wyoming_load.py's hostile clients)."""

    async def run() -> None:
        _, writer = await asyncio.open_connection("127.0.0.1", tone_port)
        writer.write(b'{"type": "synthesize", "data_length": 10000}\n{')
        await writer.drain()
        writer.close()
        await writer.wait_closed()

    with caplog.at_level(logging.INFO):
        for _ in range(3):
            asyncio.run(run())
        assert asyncio.run(_describe(tone_port)).tts[1].name == "tone"  # the server goes on
        time.sleep(0.5)
        gc.collect()  # a task that died with an exception nobody took is reported when it is collected
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, errors


LIMITED_CONNECTIONS = 3
NEVER_S = 1e6
IDLE_GRACE_S = 0.2
LONG_CHUNK_S = 8.0  # 384 KB of pcm a word: a few words are more than the sockets' buffers hold


@pytest.fixture(scope="module")
def limited() -> Iterator[tuple[int, Speaker]]:
    """A Wyoming server with a short send timeout and a connection cap."""
    settings = ServerSettings(
        max_input_chars=200, send_timeout_s=2.0, max_connections=LIMITED_CONNECTIONS, idle_grace_s=NEVER_S
    )  # no idle connection makes room: the cap's refusals are tested here
    yield from _serve_in_thread({"long": ToneModel(chunk_s=LONG_CHUNK_S), "tone": ToneModel()}, settings)


def test_a_client_that_stops_reading_is_cut_off(limited: tuple[int, Speaker]) -> None:
    """It asks for 30 words (11 MB of audio) and reads nothing: the send timeout frees the model and closes."""
    port, speaker = limited
    sock = socket.create_connection(("127.0.0.1", port))
    try:
        with sock.makefile("wb") as out:
            write_event(Synthesize(text=" ".join(["a"] * 30)).event(), out)
        wait_until(lambda: speaker.workers["long"].busy, timeout_s=READ_TIMEOUT_S)
        wait_until(lambda: not speaker.workers["long"].busy, timeout_s=READ_TIMEOUT_S)
        sock.settimeout(READ_TIMEOUT_S)
        received = 0
        with contextlib.suppress(ConnectionResetError):
            while data := sock.recv(1 << 20):
                received += len(data)
        assert received < 30 * LONG_CHUNK_S * 24000 * 2, "the whole answer fit in the buffers: nothing tested"
    finally:
        sock.close()
    assert asyncio.run(_describe(port)).tts[1].name == "long"  # the server goes on


def test_connections_past_the_cap_get_one_error(limited: tuple[int, Speaker]) -> None:
    port, _ = limited

    async def run() -> Any:
        held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(LIMITED_CONNECTIONS)]
        try:
            async with AsyncTcpClient("127.0.0.1", port) as client:
                event = await asyncio.wait_for(client.read_event(), READ_TIMEOUT_S)
                after = await asyncio.wait_for(client.read_event(), READ_TIMEOUT_S)
        finally:
            for _, writer in held:
                writer.close()
        return event, after

    event, after = asyncio.run(run())
    assert event is not None and Error.is_type(event.type)
    assert Error.from_event(event).code == "too_many_connections"
    assert after is None  # then closed
    wait_until(lambda: _describes(port), timeout_s=READ_TIMEOUT_S)  # the held ones gone, served again


def test_a_refused_client_that_already_asked_reads_the_refusal(limited: tuple[int, Speaker]) -> None:
    """Past the cap, a client that sent its request before reading (as every Wyoming client does) gets the error
    event, not a reset for its unread bytes: the server half-closes and reads until the client closes."""
    port, _ = limited

    async def run() -> list[Any]:
        held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(LIMITED_CONNECTIONS)]
        events = []
        try:
            for _ in range(5):
                async with AsyncTcpClient("127.0.0.1", port) as client:
                    await client.write_event(Synthesize(text=" ".join(["a"] * 200)).event())
                    await asyncio.sleep(0.2)  # the server has answered and closed its side by now
                    events.append(await asyncio.wait_for(client.read_event(), READ_TIMEOUT_S))
        finally:
            for _, writer in held:
                writer.close()
        return events

    events = asyncio.run(run())
    assert all(e is not None and Error.from_event(e).code == "too_many_connections" for e in events), events
    wait_until(lambda: _describes(port), timeout_s=READ_TIMEOUT_S)


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts sockets in /proc (Linux)")
def test_refusals_that_linger_are_bounded_by_the_cap(limited: tuple[int, Speaker]) -> None:
    """Refused clients that never close: at most the cap's worth of refusals wait for their clients, the rest are
    closed once the error is sent (else a flood holds a socket of the server for each, for a while)."""
    port, _ = limited
    refused_clients = 8 * LIMITED_CONNECTIONS

    async def run() -> int:
        before = open_sockets()
        held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(LIMITED_CONNECTIONS)]
        refused = []
        try:
            for _ in range(refused_clients):
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                line = await asyncio.wait_for(reader.readline(), READ_TIMEOUT_S)
                assert json.loads(line)["type"] == "error"  # refused: the server has taken it
                refused.append((reader, writer))
            clients = len(held) + len(refused)
            return settled_sockets(lambda: open_sockets() - before - clients, 2 * LIMITED_CONNECTIONS)  # the server's
        finally:
            for _, writer in held + refused:
                writer.close()

    servers_side = asyncio.run(run())
    assert servers_side <= 2 * LIMITED_CONNECTIONS, f"the server held {servers_side} sockets for a cap of 3"
    wait_until(lambda: _describes(port), timeout_s=READ_TIMEOUT_S)


def _describes(port: int) -> bool:
    try:
        return asyncio.run(_describe(port)).tts[1].name == "long"
    except (OSError, AssertionError):
        return False


IDLE_S = 2.0  # the idle server's request timeout: the one test that must beat it sends its next event at once


@pytest.fixture(scope="module")
def idle() -> Iterator[tuple[int, Speaker]]:
    """A Wyoming server with a short request timeout and a cap of LIMITED_CONNECTIONS."""
    settings = ServerSettings(
        max_input_chars=200, request_timeout_s=IDLE_S, max_connections=LIMITED_CONNECTIONS, idle_grace_s=NEVER_S
    )
    yield from _serve_in_thread({"tone": ToneModel()}, settings)


def _closed_by_server(port: int, sent: bytes = b"", trickle: bytes = b"") -> tuple[bytes, int]:
    """Connect, send ``sent``, then ``trickle`` a byte every 0.1 s; what the server sent before closing and how many
    bytes of ``trickle`` went out by then (it fails, by READ_TIMEOUT_S, if the server never closes)."""

    async def run() -> tuple[bytes, int]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(sent)
        trickled = 0

        async def drip() -> None:
            nonlocal trickled
            for byte in trickle:
                await asyncio.sleep(0.1)
                writer.write(bytes([byte]))
                await writer.drain()
                trickled += 1

        dripping = asyncio.ensure_future(drip())
        try:
            rest = await asyncio.wait_for(reader.read(), READ_TIMEOUT_S)
        finally:
            dripping.cancel()
            writer.close()
        return rest, trickled

    return asyncio.run(run())


@pytest.mark.parametrize(
    "sent",
    [b"", b'{"type": "synth', b'{"type": "synthesize", "data_length": 100}\n{"text": '],
    ids=["silent", "half a header", "half the data"],
)
def test_a_connection_without_a_whole_event_is_closed(idle: tuple[int, Speaker], sent: bytes) -> None:
    port, _ = idle
    assert _closed_by_server(port, sent) == (b"", 0)


def test_an_event_trickled_byte_by_byte_is_cut_at_the_request_timeout(idle: tuple[int, Speaker]) -> None:
    """A slowloris: each byte comes well within the timeout, the event as a whole does not; the clock runs from
    its first line's first byte to its last data byte, and is not reset by each byte."""
    port, _ = idle
    data = json.dumps({"text": "a " * 40}).encode()
    event = json.dumps({"type": "synthesize", "data_length": len(data)}).encode() + b"\n" + data
    rest, trickled = _closed_by_server(port, trickle=event)
    assert rest == b"" and trickled < len(event)


def test_silent_connections_do_not_hold_the_cap(idle: tuple[int, Speaker]) -> None:
    """The cap's worth of connections that never send anything: each is closed at the request timeout, and a
    client that came after them is served. (Without the timeout they held the cap for as long as they stayed: a
    load run's well-formed requests were refused for 10 minutes.)"""
    port, _ = idle

    async def run() -> Info:
        held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(LIMITED_CONNECTIONS)]
        try:
            for reader, _ in held:
                assert await asyncio.wait_for(reader.read(), READ_TIMEOUT_S) == b""  # closed by the server
            return await _describe(port)
        finally:
            for _, writer in held:
                writer.close()

    assert asyncio.run(run()).tts[0].name == "tone"


def test_a_connection_that_keeps_sending_events_stays_open(idle: tuple[int, Speaker]) -> None:
    """Each whole event answered restarts the clock: a client asking for speech again and again for more than the
    timeout in all keeps its connection."""
    port, _ = idle

    async def run() -> int:
        answered = 0
        async with AsyncTcpClient("127.0.0.1", port) as client:
            start = time.monotonic()
            while time.monotonic() - start < 2.5 * IDLE_S:
                await client.write_event(Synthesize(text="a b").event())
                events, audio = await _read_until(client, AudioStop)
                assert AudioStop.is_type(events[-1].type) and audio
                answered += 1  # and the next at once: the server's clock waits on this client alone
        return answered

    assert asyncio.run(run()) >= 3


@pytest.fixture(scope="module")
def evicting() -> Iterator[tuple[int, Speaker]]:
    """A cap of LIMITED_CONNECTIONS where a connection idle for IDLE_GRACE_S makes room (a long request timeout)."""
    settings = ServerSettings(max_connections=LIMITED_CONNECTIONS, idle_grace_s=IDLE_GRACE_S)
    yield from _serve_in_thread({"tone": ToneModel()}, settings)


def test_idle_connections_make_room_for_a_client(evicting: tuple[int, Speaker]) -> None:
    """The cap's worth of connections that send nothing, or half an event, do not keep a client out: each
    newcomer takes the place of the one that has waited longest, and is served."""
    port, _ = evicting

    async def run() -> None:
        held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(LIMITED_CONNECTIONS)]
        held[-1][1].write(b'{"type": "synthesize", "data_length": 100}\n{"te')  # half an event
        newcomers = []
        try:
            await asyncio.sleep(2 * IDLE_GRACE_S)  # idle past the grace (a busy machine only makes it longer)
            for _ in range(2):  # each stays open, idle after its answer (the youngest wait)
                client = AsyncTcpClient("127.0.0.1", port)
                await client.connect()
                newcomers.append(client)
                await client.write_event(Synthesize(text="a b").event())
                events, audio = await _read_until(client, AudioStop)
                assert AudioStop.is_type(events[-1].type) and audio, [e.type for e in events]
            for reader, _ in held[:2]:  # the two oldest made room
                assert await asyncio.wait_for(reader.read(), READ_TIMEOUT_S) == b""
            assert not held[2][0].at_eof()  # the youngest of them still open
        finally:
            for _, writer in held:
                writer.close()
            for client in newcomers:
                await client.disconnect()

    asyncio.run(run())


def test_a_failure_inside_a_stream_is_one_error_then_synthesize_stopped(tone_port: int) -> None:
    """Home Assistant reads a stream's answer until synthesize-stopped: after an error the rest of the stream
    (its chunks, the compatibility synthesize) is dropped, and the stop is still answered."""

    async def run() -> list[Any]:
        async with AsyncTcpClient("127.0.0.1", tone_port) as client:
            await client.write_event(SynthesizeStart().event())
            for piece in ["one FAIL two. ", "three four. ", "five six."]:
                await client.write_event(SynthesizeChunk(piece).event())
            await client.write_event(Synthesize("one FAIL two. three four. five six.").event())
            await client.write_event(SynthesizeStop().event())
            events, _ = await _read_until(client, SynthesizeStopped)
            while not SynthesizeStopped.is_type(events[-1].type):
                more, _ = await _read_until(client, SynthesizeStopped)
                events += more
            return events

    kinds = [e.type for e in asyncio.run(run())]
    assert kinds.count("error") == 1 and kinds[-1] == "synthesize-stopped"
    assert "audio-stop" not in kinds[kinds.index("error") :]  # nothing spoken after the error
    assert kinds.count("audio-start") == kinds.count("audio-stop") == 1  # the cycle cut short is still closed


def test_a_synthesize_failing_mid_audio_is_its_error_then_the_close(tone_port: int) -> None:
    """A plain synthesize's client reads until audio-stop and would play audio cut short as if whole: after audio
    has started, a failure is its error, then the connection closes (no audio-stop)."""

    async def run() -> list[Any]:
        async with AsyncTcpClient("127.0.0.1", tone_port) as client:
            await client.write_event(Synthesize("one FAIL two").event())
            events = []
            while (event := await asyncio.wait_for(client.read_event(), READ_TIMEOUT_S)) is not None:
                events.append(event)
            return events

    kinds = _types(asyncio.run(run()))
    assert kinds == ["audio-start", "audio-chunk", "error"]


def test_a_stretch_with_nothing_to_say_is_passed_over_and_the_reply_goes_on(tone_port: int) -> None:
    """A Markdown rule or a lone bullet in a streamed reply: its stretch is passed over, the next sentences are
    spoken (before, one error dropped the rest of the stream)."""
    pieces = ["Here is the plan:\n", "---\n", "first we go. ", "* \n", "Then we rest."]

    async def run() -> tuple[list[Any], bytes]:
        async with AsyncTcpClient("127.0.0.1", tone_port) as client:
            await client.write_event(SynthesizeStart().event())
            for piece in pieces:
                await client.write_event(SynthesizeChunk(piece).event())
            await client.write_event(SynthesizeStop().event())
            return await _read_until(client, SynthesizeStopped)

    events, audio = asyncio.run(run())
    kinds = _types(events)
    assert "error" not in kinds and kinds[-1] == "synthesize-stopped"
    samples, _ = decode(audio, "pcm", 24000)
    spoken = [e for e in events if AudioStart.is_type(e.type)]
    assert len(spoken) == 3 and len(samples) == len(_tone(["Here is the plan:", "first we go.", "Then we rest."]))


@pytest.mark.parametrize(
    ("voice", "chunk"),
    # refused at the start (its chunks dropped, not each an error); at the stop, where held text is spoken
    [({"language": 3}, "one two. "), ("high", "one two. "), ({"name": 5}, "Hi.")],
)
def test_a_stream_whose_voice_cannot_be_read_is_one_error_then_synthesize_stopped(
    tone_port: int, voice: Any, chunk: str
) -> None:
    """A synthesize-start whose voice data is of the wrong shape: one error, its chunks dropped, the stop answered."""

    async def run() -> list[Any]:
        reader, writer = await asyncio.open_connection("127.0.0.1", tone_port)
        data = json.dumps({"voice": voice}).encode()
        writer.write(json.dumps({"type": "synthesize-start", "data_length": len(data)}).encode() + b"\n" + data)
        await async_write_event(SynthesizeChunk(chunk).event(), writer)
        await async_write_event(SynthesizeStop().event(), writer)
        client = SimpleNamespace(read_event=lambda: async_read_event(reader))
        events, _ = await _read_until(client, SynthesizeStopped)
        while not SynthesizeStopped.is_type(events[-1].type):
            more, _ = await _read_until(client, SynthesizeStopped)
            events += more
        writer.close()
        return events

    kinds = [e.type for e in asyncio.run(run())]
    assert kinds == ["error", "synthesize-stopped"]


@pytest.mark.parametrize(
    "event",
    [
        {"type": "synthesize", "data": {"text": 5}},
        {"type": "synthesize", "data": {"text": "hi", "voice": {"language": 3}}},
        {"type": "synthesize", "data": {"text": "hi", "voice": "high"}},  # was spoken in the default voice
    ],
)
def test_event_data_of_the_wrong_shape_is_one_error(tone_port: int, event: dict[str, Any]) -> None:
    async def run() -> tuple[Any, list[Any]]:
        reader, writer = await asyncio.open_connection("127.0.0.1", tone_port)
        data = json.dumps(event["data"]).encode()
        writer.write(json.dumps({"type": event["type"], "data_length": len(data)}).encode() + b"\n" + data)
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), READ_TIMEOUT_S)
        writer.close()
        return json.loads(line), []

    header, _ = asyncio.run(run())
    assert header["type"] == "error"


def test_the_bounded_reader_refuses_only_what_is_too_long() -> None:
    from ggtts.server.wyoming import BoundedReader

    async def run() -> None:
        stream = asyncio.StreamReader()
        stream.feed_data(b'{"type": "describe"}\n0123456789')
        reader = BoundedReader(stream, limit=8)
        assert await reader.readline() == b'{"type": "describe"}\n'
        assert await reader.readexactly(4) == b"0123"
        with pytest.raises(ValueError, match="more than this server reads"):
            await reader.readexactly(9)
        reader.feed_eof()  # what AsyncEventHandler.stop() calls
        assert stream.at_eof() is False and await reader.readexactly(6) == b"456789" and stream.at_eof()

    asyncio.run(run())


def test_the_bounded_readers_clock_runs_from_an_events_first_line_to_its_last_byte() -> None:
    from ggtts.server.wyoming import BoundedReader

    async def run() -> None:
        stream = asyncio.StreamReader()
        reader = BoundedReader(stream, limit=100, idle_s=0.2)
        stream.feed_data(b'{"type": "describe"}\n')
        assert await reader.readline() == b'{"type": "describe"}\n'  # within the time: read
        stream.feed_data(b'{"type": "synthesize", "data_length": 8}\n0123')
        assert await reader.readline()
        with pytest.raises(TimeoutError):  # the rest of its data never comes
            await reader.readexactly(8)
        with pytest.raises(TimeoutError):  # no line at all
            await BoundedReader(asyncio.StreamReader(), limit=100, idle_s=0.2).readline()
        patient = BoundedReader(stream := asyncio.StreamReader(), limit=100)  # stdio://: no clock
        asyncio.get_running_loop().call_later(0.4, stream.feed_data, b"late\n")
        assert await patient.readline() == b"late\n"

    asyncio.run(run())
