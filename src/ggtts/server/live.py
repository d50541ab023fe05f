"""Text in pieces, speech as soon as a clause is complete: the WebSocket at ``/v1/audio/speech/live``.

A voice agent writes its reply token by token. It opens the socket, may send a ``start`` message (the fields of
a ``/v1/audio/speech`` body but ``input``: model, voice, speed, response_format, options, ...), then ``text``
messages as the words come, and ``end`` when the reply is complete (``flush`` to have what is pending spoken now
and keep the socket open for the next turn). The server cuts the text into stretches as they complete
(:class:`ggtts.text.incremental.TextStream`: the first at a clause, then at sentences) and speaks each on the
model's thread as soon as it has it, while more text arrives:

=======================  ================================================================================
client -> server (JSON)  ``{"type": "start", ...}`` (optional, first), ``{"type": "text", "text": "..."}``,
                         ``{"type": "flush"}``, ``{"type": "end"}``
server -> client         ``{"type": "ready", "model", "voice", "sample_rate", "format"}`` (JSON, first);
                         the audio as binary messages, in ``response_format`` (default ``pcm``: 16-bit
                         little-endian mono), one continuous stream over the whole session;
                         ``{"type": "words", "words": [{"word", "start", "end"}]}`` before the audio they are
                         in, seconds from the session's first sample (models with word timestamps);
                         ``{"type": "flushed"}`` once the audio of the text before a ``flush`` is sent;
                         ``{"type": "done", "audio_seconds"}`` after ``end``, then the socket closes (1000);
                         ``{"type": "error", "error": {...}}`` as in HTTP error bodies, then it closes
                         (1008 for a bad message, 1013 when the model's queue is full, 1011 for a failure
                         here).
=======================  ================================================================================

The API key, when the server has one, goes in the ``Authorization: Bearer`` header of the upgrade request, and a
browser page of another origin cannot open the socket (:mod:`ggtts.server.guard`). Unspoken text is bounded by
the server's ``--max-input-chars``: text written that far ahead of the speech is a 413-like error. The server
reads the socket all along, so a client that goes away is noticed at once and the stretch being spoken is
cancelled. After a ``flush``, compressed formats (mp3, opus, aac) end their stream and the next turn starts a new
one (mp3 and aac frames, Ogg pages, one after another), so the whole turn is heard before ``flushed``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, WebSocket, WebSocketDisconnect
from pydantic import ValidationError

from ggtts.audio import StreamedWords, WordTiming, encoded_rate
from ggtts.server.connections import IDLE_MARK, IdleMark
from ggtts.server.errors import ApiError
from ggtts.server.speaking import NOTHING_TO_SAY, Prepared, Speaker, spoken, start_encoder
from ggtts.server.streaming import StreamEncoder
from ggtts.server.validation import validation_error
from ggtts.server.worker import Deadline
from ggtts.text.incremental import TextStream

log = logging.getLogger("ggtts.server")

LIVE_PATH = "/v1/audio/speech/live"
DEFAULT_LIVE_FORMAT = "pcm"
CLOSE_NORMAL, CLOSE_POLICY, CLOSE_ERROR, CLOSE_TRY_LATER = 1000, 1008, 1011, 1013
_FLUSH, _END = object(), object()  # markers in the queue of stretches


@dataclass
class _Session:
    """One socket's settings (its ``start`` message, as a speech body) and the audio sent so far."""

    body: Any
    encoder: StreamEncoder | None = None
    seconds: float = 0.0
    stretches: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)
    waiting_chars: int = 0  # text cut into stretches and not yet taken by the speaker
    gone: asyncio.Event = field(default_factory=asyncio.Event)  # the client left
    mark: IdleMark | None = None  # where the server keeps its idle connections (connections.IdleMark)
    speaker_waits: bool = False  # the speaker waits for a stretch
    text: TextStream | None = None  # the reader's: text received, not yet a stretch

    def settle(self) -> None:
        """Idle (at the cap, it may make room for a new connection) while the speaker has nothing to do, no text
        waits to become a stretch (a reply paused mid-sentence is work in progress), and the reader waits for the
        client; else at work. Said after each message and whenever the speaker waits."""
        if self.mark is not None:
            pending = self.text is not None and bool(self.text.pending.strip())
            if self.speaker_waits and self.stretches.empty() and not pending:
                self.mark.waiting()
            else:
                self.mark.busy()


def _bad_message(message: str, param: str | None = None) -> ApiError:
    return ApiError(400, message, code="invalid_message", param=param)


def add_live_route(app: FastAPI, speaker: Speaker) -> None:
    settings = speaker.settings

    def start_body(message: dict[str, Any]) -> tuple[Any, Prepared]:
        """The session's settings: a speech body from a ``start`` message (``input`` is what comes later), and
        that body checked (model, voice, format, options) now, before any text."""
        fields = {k: v for k, v in message.items() if k != "type"}
        if "input" in fields:
            raise _bad_message("send the text in 'text' messages, not as input in 'start'", "input")
        if fields.get("stream") is False or fields.get("stream_format") == "sse":  # the socket only streams audio
            param = "stream" if fields.get("stream") is False else "stream_format"
            raise _bad_message(
                f"this socket sends the audio as it is made, in binary frames; leave '{param}' out", param
            )
        fields.setdefault("response_format", DEFAULT_LIVE_FORMAT)
        try:
            body = speaker.bodies.speech(input=".", **fields)
        except ValidationError as exc:
            raise validation_error([dict(e) for e in exc.errors()], speaker.bodies.speech) from None
        return body, speaker.prepare(body, streaming=True)

    async def receive(socket: WebSocket, session: _Session, first: dict[str, Any] | None) -> None:
        """Reads the client's messages (after ``first``, one already read) into stretches for the speaker, until
        ``end``."""
        model = speaker.model_for_voice(session.body.model, session.body.voice_name)  # the model that will speak
        text = session.text = speaker.text_stream(model)
        ended = False
        while True:
            try:
                message, first = first or await _read(socket), None
            except WebSocketDisconnect:
                session.gone.set()
                raise
            if ended:
                raise _bad_message("nothing may follow 'end'", "type")
            kind = message.get("type")
            if kind == "text":
                piece = message.get("text")
                if not isinstance(piece, str):
                    raise _bad_message("a text message carries its text as a string in 'text'", "text")
                if session.waiting_chars + len(text.pending) + len(piece) > settings.max_input_chars:
                    raise ApiError(
                        413,
                        f"more than {settings.max_input_chars} characters of text are waiting to be spoken; send less "
                        "at a time, ahead of the speech",
                        code="input_too_long",
                        param="text",
                    )
                for stretch in text.feed(piece):
                    session.waiting_chars += len(stretch)
                    session.stretches.put_nowait(stretch)
            elif kind in ("flush", "end"):
                for stretch in text.flush():
                    session.waiting_chars += len(stretch)
                    session.stretches.put_nowait(stretch)
                session.stretches.put_nowait(_FLUSH if kind == "flush" else _END)
                ended = kind == "end"  # go on reading: a client that leaves now is noticed at once
            elif kind == "start":
                raise _bad_message("'start' may only be the first message", "type")
            else:
                raise _bad_message(f"unknown message type {kind!r}; send text, flush or end", "type")
            session.settle()  # a message: at work if it left text or a stretch, else idle from now

    async def speak(socket: WebSocket, session: _Session) -> None:
        """Speaks the stretches in order, sending their audio (and words) as each chunk is made."""
        body = session.body
        while True:
            session.speaker_waits = True
            session.settle()
            stretch = await session.stretches.get()
            session.speaker_waits = False
            session.settle()
            if stretch is _FLUSH:
                if session.encoder is not None and body.response_format not in ("pcm", "wav"):
                    await _send_bytes(socket, await asyncio.to_thread(session.encoder.finish))  # the turn's tail
                    session.encoder = None  # the next turn starts a stream of its own
                await socket.send_json({"type": "flushed"})
                continue
            if stretch is _END:
                if session.encoder is not None:
                    await _send_bytes(socket, session.encoder.finish())
                await socket.send_json({"type": "done", "audio_seconds": round(session.seconds, 3)})
                return
            session.waiting_chars -= len(stretch)
            prepared = speaker.prepare(body.model_copy(update={"input": stretch}), streaming=True)
            if session.encoder is None:
                session.encoder = start_encoder(body.response_format, prepared.worker.model.sample_rate)
                await _send_bytes(socket, session.encoder.start())
            offset = session.seconds  # where this stretch starts in the session's audio
            deadline = Deadline(settings.timeout_s, _is_set(session.gone))
            held = StreamedWords()  # a word a chunk boundary cut is sent once whole, with the chunk of its end
            try:
                async with contextlib.aclosing(spoken(prepared, deadline)) as chunks:
                    async for chunk in chunks:
                        await _send_words(socket, held.add(chunk.words), offset)
                        encoder = session.encoder
                        data = (
                            encoder.feed(chunk)
                            if body.response_format == "pcm"
                            else await asyncio.to_thread(encoder.feed, chunk)
                        )
                        await _send_bytes(socket, data)
                        session.seconds += chunk.duration
            except ApiError as error:
                if error.code != NOTHING_TO_SAY:
                    raise
                log.info("live speech: passed over a stretch with nothing to say (%r)", stretch[:40])
            await _send_words(socket, held.finish(), offset)

    @app.websocket(LIVE_PATH)
    async def live(socket: WebSocket) -> None:
        await socket.accept()
        session: _Session | None = None
        try:
            try:  # a socket that says nothing is closed, as an HTTP connection that sends no request
                first: dict[str, Any] | None = await asyncio.wait_for(_read(socket), settings.request_timeout_s)
            except TimeoutError:
                raise ApiError(
                    408, f"no message within {settings.request_timeout_s:g} s of connecting", code="request_timeout"
                ) from None
            assert first is not None
            body, prepared = start_body(first if first.get("type") == "start" else {})
            session = _Session(body, mark=socket.scope.get(IDLE_MARK))
            if first.get("type") == "start":
                first = None  # else no start message: the defaults; the first message is handled as any other
            await socket.send_json(
                {
                    "type": "ready",
                    "model": prepared.worker.name,
                    "voice": session.body.voice_name or prepared.worker.model.default_voice,
                    "sample_rate": encoded_rate(session.body.response_format, prepared.worker.model.sample_rate),
                    "format": session.body.response_format,
                }
            )
            await _run_both(receive(socket, session, first), speak(socket, session))
            await socket.close(CLOSE_NORMAL)
        except (WebSocketDisconnect, OSError):  # uvicorn's ClientDisconnected, on a send, is an OSError
            log.info("live speech: the client left")
        except ApiError as error:
            log.info("live speech refused: %s", error.message)
            await _send_error(socket, error)
        except Exception as exc:  # a failure here: the client hears why, the log has the rest
            log.exception("live speech failed")
            await _send_error(socket, ApiError(500, f"live speech failed ({type(exc).__name__})", code="failed"))
        finally:
            if session is not None and session.encoder is not None:
                session.encoder.close()


async def _run_both(receiving: Any, speaking: Any) -> None:
    """Runs the reader and the speaker together until the speaker is done (the reader reads on meanwhile, to
    notice a client that leaves); the first failure of either stops both (the other is cancelled: a stretch being
    spoken stops at its next layer)."""
    reader = asyncio.ensure_future(receiving)
    talker = asyncio.ensure_future(speaking)
    try:
        done, _ = await asyncio.wait({reader, talker}, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            task.result()  # raises the failure, if any
        await talker
    finally:
        for task in (reader, talker):
            task.cancel()
        await asyncio.gather(reader, talker, return_exceptions=True)


async def _read(socket: WebSocket) -> dict[str, Any]:
    """The next message from the client, a JSON object with a ``type`` (else 400)."""
    frame = await socket.receive()
    if frame["type"] == "websocket.disconnect":
        raise WebSocketDisconnect(frame.get("code", CLOSE_NORMAL))
    raw = frame.get("text")
    if raw is None:
        raise _bad_message("send JSON text messages ({'type': 'text', 'text': ...}), not binary ones")
    try:
        message: Any = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise _bad_message(f"a message is not JSON ({exc.msg} at character {exc.pos})") from None
    except (ValueError, RecursionError) as exc:  # numbers too long to read, nesting too deep
        raise _bad_message(f"a message is not JSON this server reads ({type(exc).__name__})") from None
    if not isinstance(message, dict) or not isinstance(message.get("type"), str):
        raise _bad_message("each message is a JSON object with a 'type': start, text, flush or end", "type")
    return message


def _is_set(event: asyncio.Event) -> Any:
    async def is_set() -> bool:
        return event.is_set()

    return is_set


async def _send_bytes(socket: WebSocket, data: bytes) -> None:
    if data:
        await socket.send_bytes(data)


async def _send_words(socket: WebSocket, words: Sequence[WordTiming], offset: float) -> None:
    """A ``words`` message for ``words`` (times in the stretch, ``offset`` seconds into the session); none for none."""
    if words:
        times = [{"word": w.text, "start": round(offset + w.start, 3), "end": round(offset + w.end, 3)} for w in words]
        await socket.send_json({"type": "words", "words": times})


async def _send_error(socket: WebSocket, error: ApiError) -> None:
    with contextlib.suppress(Exception):  # the client may already be gone
        await socket.send_json({"type": "error", **error.body()})
        await socket.close(_close_code(error))


def _close_code(error: ApiError) -> int:
    """1008 for a bad message, 1013 ("try again later") when the model's queue is full, 1011 for a failure."""
    if error.status < 500:
        return CLOSE_POLICY
    return CLOSE_TRY_LATER if error.status == 503 else CLOSE_ERROR
