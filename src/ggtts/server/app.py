"""The FastAPI application: OpenAI-compatible speech, model and voice listings, health, and the web page."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import StreamingResponse
from starlette.types import Send

from ggtts import __version__
from ggtts.api import TTSModel
from ggtts.audio import Audio, StreamedWords, WordTiming, encoded_rate
from ggtts.server.chat import CHAT_PATH, ChatRequest, Completion, output_format, question
from ggtts.server.errors import ApiError
from ggtts.server.guard import GuardMiddleware
from ggtts.server.live import add_live_route
from ggtts.server.options import RequestBodies, checked_options, option_cards
from ggtts.server.schemas import (
    EVENT_STREAM,
    MEDIA_TYPES,
    NDJSON,
    AudioModel,
    AudioModels,
    AudioVoice,
    AudioVoices,
    CaptionedSpeechRequest,
    Health,
    ModelCard,
    ModelHealth,
    ModelList,
    ModelVoices,
    SpeechRequest,
    VoiceId,
    VoiceList,
)
from ggtts.server.settings import ServerSettings
from ggtts.server.speaking import (
    Prepared,
    Speaker,
    check_voice,
    spoken,
    start_encoder,
    stepped,
    synthesis_error,
)
from ggtts.server.streaming import StreamEncoder, encode_whole, unsupported_rate_message
from ggtts.server.validation import validation_error
from ggtts.server.worker import ClientGone, Deadline, ModelWorker, Steps

log = logging.getLogger("ggtts.server")

STATIC_DIR = Path(__file__).parent / "static"
CAPTIONED_PATHS = ("/v1/audio/captioned_speech", "/dev/captioned_speech")  # ours, and Kokoro-FastAPI's
CLIENT_CLOSED_REQUEST = 499  # nginx's status for a client that left first; only ever seen in logs


def create_app(models: Mapping[str, TTSModel | Sequence[TTSModel]], settings: ServerSettings | None = None) -> FastAPI:
    """The app serving ``models`` under their names (a name may stand for several copies of its model: see
    :class:`~ggtts.server.speaking.Speaker`); the first is the default model."""
    speaker = Speaker(models, settings or ServerSettings())

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        speaker.shutdown()

    app = FastAPI(title="ggtts", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.workers = speaker.workers
    app.state.settings = speaker.settings
    chat = any(w.model.family is not None and w.model.family.capabilities.chat for w in speaker.workers.values())
    app.add_middleware(GuardMiddleware, settings=speaker.settings, chat=chat)
    app.state.bodies = speaker.bodies
    _add_error_handlers(app)
    _add_routes(app, speaker)
    add_live_route(app, speaker)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    return app


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> Response:
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> Response:
        bodies: RequestBodies = request.app.state.bodies
        path = request.url.path
        body = ChatRequest if path == CHAT_PATH else bodies.captioned if path in CAPTIONED_PATHS else bodies.speech
        error = validation_error(exc.errors(), body)
        return JSONResponse(error.body(), status_code=error.status)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if exc.status_code == 404:
            message = f"there is no {request.url.path} here; the API is under /v1 (see GET /v1/models)"
        else:
            message = f"{request.method} {request.url.path}: {exc.detail}"
        error = ApiError(exc.status_code, message, code=str(exc.detail).lower().replace(" ", "_"))
        return JSONResponse(error.body(), status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(ClientGone)
    async def client_gone(request: Request, exc: ClientGone) -> Response:
        return Response(status_code=CLIENT_CLOSED_REQUEST)


def _add_routes(app: FastAPI, speaker: Speaker) -> None:
    created = int(time.time())
    workers, settings, bodies = speaker.workers, speaker.settings, speaker.bodies

    @app.get("/health")
    async def health() -> Health:
        states = {n: speaker.health(n) for n in workers}
        return Health(models={n: ModelHealth(busy=busy, waiting=waiting) for n, (busy, waiting) in states.items()})

    models = ModelList(  # what is served does not change: described once
        data=[
            ModelCard(
                id=n,
                created=created,
                family=w.model.family_name,
                architecture=w.model.architecture,
                sample_rate=w.model.sample_rate,
                timestamps=bool(w.model.family and w.model.family.capabilities.timestamps),
                options=option_cards(w.model.family),
            )
            for n, w in workers.items()
        ]
    )

    @app.get("/v1/models")
    async def list_models() -> ModelList:
        return models

    @app.get("/v1/voices")
    async def list_voices(model: str | None = None) -> VoiceList:
        chosen = [speaker.worker_for(model)] if model is not None else list(workers.values())
        return VoiceList(
            data=[ModelVoices(model=w.name, voices=w.model.voices, default_voice=w.model.default_voice) for w in chosen]
        )

    @app.get("/v1/audio/models")
    async def list_audio_models() -> AudioModels:
        return AudioModels(models=[AudioModel(id=name) for name in workers])

    @app.get("/v1/audio/voices")
    async def list_audio_voices(model: str | None = None) -> AudioVoices:
        chosen = [speaker.worker_for(model)] if model is not None else list(workers.values())
        voices: dict[str, AudioVoice] = {}
        for w in chosen:
            for voice in w.model.voices:
                described = w.model.voice_description(voice)
                if len(chosen) > 1:
                    described = f"{described} · {w.name}"
                voices.setdefault(voice, AudioVoice(id=voice, name=described))
        return AudioVoices(voices=list(voices.values()))

    async def speech(body: SpeechRequest, request: Request) -> Response:
        """OpenAI's ``/v1/audio/speech``: the audio's bytes as they are made (the default for every format but
        flac), one whole file (``"stream": false``), or server-sent events (``"stream_format": "sse"``)."""
        prepared = speaker.prepare(body, streaming=body.streaming)
        worker, text, chunks = prepared.worker, prepared.text, prepared.chunks
        model = worker.model
        fmt = body.response_format
        deadline = Deadline(settings.timeout_s, request.is_disconnected)
        headers = {"X-Sample-Rate": str(encoded_rate(fmt, model.sample_rate))}
        started = time.monotonic()
        if body.sse:
            produce = lambda encoder: _sse_events(chunks(), encoder, chars=len(text))  # noqa: E731
            return await _streamed(worker, text, fmt, produce, deadline, headers, EVENT_STREAM, error_bytes=_sse_error)
        if body.streaming:
            return await _streamed(
                worker, text, fmt, lambda encoder: _encoded(chunks(), encoder), deadline, headers, MEDIA_TYPES[fmt]
            )
        audio = await _whole(prepared, deadline)
        data = await asyncio.to_thread(encode_whole, audio, fmt)
        log.info(
            "%s: %d chars -> %.2f s of audio as %s in %.2f s",
            worker.name,
            len(text),
            audio.duration,
            fmt,
            time.monotonic() - started,
        )
        return Response(data, media_type=MEDIA_TYPES[fmt], headers=headers)

    speech.__annotations__["body"] = bodies.speech  # this server's families' options in the schema
    app.post("/v1/audio/speech", response_model=None)(speech)

    async def captioned_speech(body: CaptionedSpeechRequest, request: Request) -> Response:
        """Audio and its word timestamps as JSON, in the shape of Kokoro-FastAPI's ``/dev/captioned_speech``:
        ``{"audio": base64, "audio_format": media type, "timestamps": [{"word", "start_time", "end_time"}]}``;
        streamed (the default, as there), one such object per line for each chunk, whose ``audio`` fields join
        into one file of the format asked for."""
        prepared = speaker.prepare(body, streaming=body.streaming)
        worker, text, chunks = prepared.worker, prepared.text, prepared.chunks
        model = worker.model
        fmt = body.response_format
        if body.sse:
            raise ApiError(
                400,
                "captioned speech streams JSON lines; leave stream_format out (or use /v1/audio/speech for sse)",
                code="unsupported_value",
                param="stream_format",
            )
        if body.return_timestamps and not (model.family and model.family.capabilities.timestamps):
            raise ApiError(
                400,
                f"model '{worker.name}' ({model.family_name}) gives no word timestamps; "
                "ask with return_timestamps false, or use /v1/audio/speech",
                code="unsupported_value",
                param="return_timestamps",
            )
        deadline = Deadline(settings.timeout_s, request.is_disconnected)
        headers = {"X-Sample-Rate": str(encoded_rate(fmt, model.sample_rate))}
        keep = body.return_timestamps
        if body.streaming:
            produce = lambda encoder: _captioned(chunks(), encoder, fmt=fmt, keep=keep)  # noqa: E731
            return await _streamed(worker, text, fmt, produce, deadline, headers, NDJSON, error_bytes=_json_line)
        audio = await _whole(prepared, deadline)
        data = await asyncio.to_thread(encode_whole, audio, fmt)
        return JSONResponse(_caption_body(data, fmt, audio.words if keep else ()), headers=headers)

    captioned_speech.__annotations__["body"] = bodies.captioned
    for path in CAPTIONED_PATHS:
        app.post(path, response_model=None)(captioned_speech)

    @app.post(CHAT_PATH, response_model=None)
    async def chat_completions(body: ChatRequest, request: Request) -> Response:
        """OpenAI's chat completions with audio (:mod:`ggtts.server.chat`): the model hears the question (text,
        audio or both) and answers in text, or in text and speech; streamed as ``chat.completion.chunk`` events."""
        worker = speaker.worker_for(body.model)
        model = worker.model
        if not (model.family is not None and model.family.capabilities.chat):
            raise ApiError(
                400,
                f"model '{worker.name}' ({model.family_name}) speaks text; it does not answer questions "
                "(use POST /v1/audio/speech)",
                code="unsupported_value",
                param="model",
            )
        asked = question(body)
        fmt = output_format(body)
        voice = None
        if fmt is not None:
            assert body.audio is not None
            name = body.audio.voice.id if isinstance(body.audio.voice, VoiceId) else body.audio.voice
            voice = check_voice(worker, name)
            rate_problem = unsupported_rate_message(fmt, model.sample_rate)
            if rate_problem is not None:
                raise ApiError(400, rate_problem, code="unsupported_value", param="audio.format")
        given = {k: v for k, v in (body.options or {}).items() if v is not None}
        options: dict[str, object] = checked_options(worker.name, model, given, excluded=("mode",))
        if asked.system is not None:
            options["system"] = asked.system
        limit = body.max_completion_tokens or body.max_tokens
        if limit is not None:
            options["max_reply_tokens"] = limit
        if body.seed is not None:
            options["seed"] = body.seed
        completion = Completion(worker.name)
        deadline = Deadline(settings.timeout_s, request.is_disconnected)

        def answer() -> Iterator[object]:  # runs on the model's thread: the reply, then its speech
            reply = model.chat(asked.text, audio=asked.audio, voice=voice, speak=fmt is not None, **options)
            completion.prompt_tokens, completion.completion_tokens = reply.prompt_tokens, len(reply.tokens)
            completion.finished = reply.finished
            yield reply
            yield from reply.audio

        chars = len(asked.text) + (len(asked.audio) // 1000 if asked.audio else 0)
        if body.stream:
            usage = body.stream_options is not None and body.stream_options.include_usage
            produce = lambda encoder: _chat_events(answer(), encoder, completion, fmt is not None, usage)  # noqa: E731
            headers = {"X-Sample-Rate": str(encoded_rate(fmt, model.sample_rate))}
            return await _streamed(
                worker, asked.text, fmt or "pcm", produce, deadline, headers, EVENT_STREAM, error_bytes=_sse_error
            )
        items = await _collected(worker, answer, deadline, chars)
        reply, parts = items[0], [p for p in items[1:] if isinstance(p, Audio)]
        data = None
        if fmt is not None:
            audio = Audio.concatenate(parts) if parts else Audio(np.zeros(0, np.float32), model.sample_rate)
            data = await asyncio.to_thread(encode_whole, audio, fmt)
        return JSONResponse(completion.whole(reply.text, data))

    @app.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html", media_type="text/html")


async def _whole(prepared: Prepared, deadline: Deadline) -> Audio:
    """The whole audio of a prepared request (its chunks joined)."""
    async with contextlib.aclosing(spoken(prepared, deadline)) as chunks:
        parts = [part async for part in chunks]
    if not parts:
        return Audio(np.zeros(0, dtype=np.float32), prepared.worker.model.sample_rate)
    return Audio.concatenate(parts)


async def _collected(
    worker: ModelWorker, factory: Callable[[], Iterator[object]], deadline: Deadline, chars: int
) -> list[Any]:
    """Every item of ``factory()``, made on ``worker``'s thread in the request's turn."""
    async with contextlib.aclosing(stepped(worker, factory, deadline, chars)) as items:
        return [item async for item in items]


def _chat_events(
    items: Iterator[Any], encoder: StreamEncoder, completion: Completion, speaks: bool, usage: bool
) -> Iterator[bytes]:
    """Runs on the model's thread: the answer's ``chat.completion.chunk`` events once the thinker has answered
    (its text, then its speech's encoded pieces), then ``[DONE]``."""
    reply = next(items)
    audio = _encoded(items, encoder) if speaks else None
    for event in completion.deltas(reply.text, audio, usage):
        yield _sse_event(event)
    yield b"data: [DONE]\n\n"


def _caption_body(data: bytes, fmt: str, words: Sequence[WordTiming]) -> dict[str, object]:
    return {
        "audio": base64.b64encode(data).decode("ascii"),
        "audio_format": MEDIA_TYPES[fmt],
        "timestamps": [{"word": w.text, "start_time": round(w.start, 3), "end_time": round(w.end, 3)} for w in words],
    }


def _json_line(error: ApiError) -> bytes:
    return json.dumps(error.body(), ensure_ascii=False).encode() + b"\n"


def _sse_event(event: Mapping[str, object]) -> bytes:
    return b"data: " + json.dumps(event, ensure_ascii=False).encode() + b"\n\n"


def _sse_error(error: ApiError) -> bytes:
    return _sse_event({"type": "error", **error.body()})


def _sse_events(chunks: Iterator[Audio], encoder: StreamEncoder, *, chars: int) -> Iterator[bytes]:
    """Runs on the model's thread: OpenAI's speech events, a ``speech.audio.delta`` for each chunk's encoded bytes
    (base64), then ``speech.audio.done``. Its ``usage`` counts characters in and chunks out (ggtts has no
    tokens; both are what was asked and made here)."""
    count = 0
    for data, _ in _encoded_with_words(chunks, encoder):
        if data:
            count += 1
            yield _sse_event({"type": "speech.audio.delta", "audio": base64.b64encode(data).decode("ascii")})
    usage = {"input_tokens": chars, "output_tokens": count, "total_tokens": chars + count}
    yield _sse_event({"type": "speech.audio.done", "usage": usage})


def _captioned(chunks: Iterator[Audio], encoder: StreamEncoder, *, fmt: str, keep: bool) -> Iterator[bytes]:
    """Runs on the model's thread: one JSON line per chunk, its encoded audio and its words (see
    ``captioned_speech``); the encoder's last bytes come in a line of their own."""
    for data, words in _encoded_with_words(chunks, encoder):
        yield json.dumps(_caption_body(data, fmt, words if keep else ()), ensure_ascii=False).encode() + b"\n"


Encoded = Iterator[tuple[bytes, Sequence[WordTiming]]]


def _encoded_with_words(chunks: Iterator[Audio], encoder: StreamEncoder) -> Encoded:
    """Each chunk's encoded bytes (the format's header in front of the first) and the words that are whole with it
    (a word a chunk boundary cut comes once, with the chunk where it ends: :class:`StreamedWords`); the encoder's
    last bytes with any word still held."""
    head = encoder.start()
    held = StreamedWords()
    for chunk in chunks:
        yield head + encoder.feed(chunk), held.add(chunk.words)
        head = b""
    yield head + encoder.finish(), held.finish()


def _encoded(chunks: Iterator[Audio], encoder: StreamEncoder) -> Iterator[bytes]:
    """Runs on the model's thread: each chunk as encoded bytes (the format's header in front of the first)."""
    for data, _ in _encoded_with_words(chunks, encoder):
        yield data


async def _streamed(
    worker: ModelWorker,
    text: str,
    fmt: str,
    produce: Callable[[StreamEncoder], Iterator[bytes]],
    deadline: Deadline,
    headers: dict[str, str],
    media_type: str,
    error_bytes: Callable[[ApiError], bytes] | None = None,
) -> Response:
    """A streamed response of ``produce(encoder)``'s pieces: waits for the first (so early failures still get an
    error status), then streams the rest; the ``fmt`` encoder is closed at the end, whatever happens. A failure
    after the first piece cuts the connection (the status is sent); ``error_bytes`` (NDJSON, SSE) gives what goes
    out first, in the stream's own form, to say why."""
    # Built before a queue place is taken: a failure here has no ticket to give back.
    encoder = start_encoder(fmt, worker.model.sample_rate)
    try:
        ticket = worker.admit(len(text))
    except BaseException:
        encoder.close()
        raise
    body = functools.partial(produce, encoder)
    steps: Steps[bytes] | None = None
    try:
        await ticket.take_turn(deadline)
        steps = Steps(ticket, body, deadline)
        first = await steps.next() or b""
    except BaseException as exc:
        if steps is not None:
            steps.close(encoder.close)
        else:
            ticket.release()
            encoder.close()
        if isinstance(exc, Exception) and not isinstance(exc, ClientGone):
            raise synthesis_error(exc) from exc
        raise
    # The deadline goes on polling for a disconnect while each step runs: Starlette (ASGI 2.4) only notices one
    # when a send fails, which would be after the chunk in progress, however long it takes.
    body_iterator = _stream_body(first, steps, encoder, error_bytes)
    return AbortableStreamingResponse(body_iterator, media_type=media_type, headers=headers)


class StreamAborted(Exception):
    """Synthesis failed after the response had started: the connection is cut so the client sees a broken
    transfer rather than audio that merely looks short."""


async def _stream_body(
    first: bytes, steps: Steps[bytes], encoder: StreamEncoder, error_bytes: Callable[[ApiError], bytes] | None = None
) -> AsyncIterator[bytes]:
    try:
        yield first
        while (data := await steps.next()) is not None:
            if data:
                yield data
    except ClientGone:
        raise StreamAborted("the client left") from None
    except Exception as exc:
        error = synthesis_error(exc)
        log.warning("stream cut after it started: %s", error.message)
        if error_bytes is not None:  # the client reading lines or events learns why, before the cut
            yield error_bytes(error)
        raise StreamAborted(error.message) from exc
    finally:
        steps.close(encoder.close)


class AbortableStreamingResponse(StreamingResponse):
    """A streaming response that ends without its final empty chunk when its body raises ``StreamAborted``."""

    async def stream_response(self, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        try:
            async for chunk in self.body_iterator:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except StreamAborted:
            return
        await send({"type": "http.response.body", "body": b"", "more_body": False})
