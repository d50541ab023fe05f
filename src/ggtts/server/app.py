"""The FastAPI application: OpenAI-compatible speech, model and voice listings, health, and the web page."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import functools
import json
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

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
from ggtts.audio import Audio, WordTiming
from ggtts.errors import GGTTSError, InputError
from ggtts.families.base import UnknownVoiceError, VoiceMix, VoiceWeightError, check_unicode
from ggtts.server.errors import ApiError
from ggtts.server.guard import GuardMiddleware
from ggtts.server.options import RequestBodies, option_cards, request_bodies, request_options
from ggtts.server.schemas import (
    MEDIA_TYPES,
    NDJSON,
    CaptionedSpeechRequest,
    Health,
    ModelCard,
    ModelHealth,
    ModelList,
    ModelVoices,
    SpeechRequest,
    VoiceList,
)
from ggtts.server.settings import ServerSettings
from ggtts.server.streaming import STREAMABLE_FORMATS, StreamEncoder, stream_encoder, unsupported_rate_message
from ggtts.server.validation import check_download_link, validation_error
from ggtts.server.worker import ClientGone, Deadline, ModelWorker, Steps, Ticket

log = logging.getLogger("ggtts.server")

STATIC_DIR = Path(__file__).parent / "static"
CAPTIONED_PATHS = ("/v1/audio/captioned_speech", "/dev/captioned_speech")  # ours, and Kokoro-FastAPI's
CLIENT_CLOSED_REQUEST = 499  # nginx's status for a client that left first; only ever seen in logs


def create_app(models: Mapping[str, TTSModel], settings: ServerSettings | None = None) -> FastAPI:
    """The app serving ``models`` under their names; the first is the default model."""
    if not models:
        raise ValueError("the server needs at least one model")
    settings = settings or ServerSettings()
    workers = {name: ModelWorker(name, model, settings.max_queue) for name, model in models.items()}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        for worker in workers.values():
            worker.shutdown()

    app = FastAPI(title="ggtts", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None)
    app.state.workers = workers
    app.state.settings = settings
    app.add_middleware(GuardMiddleware, settings=settings)
    app.state.bodies = bodies = request_bodies(w.model.family for w in workers.values())
    _add_error_handlers(app)
    _add_routes(app, workers, settings, bodies)
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    return app


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError) -> Response:
        return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, exc: RequestValidationError) -> Response:
        bodies: RequestBodies = request.app.state.bodies
        error = validation_error(
            exc.errors(), bodies.captioned if request.url.path in CAPTIONED_PATHS else bodies.speech
        )
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


def _add_routes(app: FastAPI, workers: dict[str, ModelWorker], settings: ServerSettings, bodies: RequestBodies) -> None:
    created = int(time.time())
    default_model = next(iter(workers))

    def worker_for(name: str | None) -> ModelWorker:
        if name is None or (name in OPENAI_MODELS and name not in workers):
            name = default_model  # OpenAI's model names, which clients send by default, mean the default model
        if name not in workers:
            raise ApiError(
                404,
                f"model '{name}' is not loaded on this server; available: {', '.join(workers)}",
                code="model_not_found",
                param="model",
            )
        return workers[name]

    @app.get("/health")
    async def health() -> Health:
        return Health(models={n: ModelHealth(busy=w.busy, waiting=w.waiting) for n, w in workers.items()})

    models = ModelList(  # what is served does not change: described once
        data=[
            ModelCard(
                id=n,
                created=created,
                family=w.model.family_name,
                architecture=w.model.architecture,
                sample_rate=w.model.sample_rate,
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
        chosen = [worker_for(model)] if model is not None else list(workers.values())
        return VoiceList(
            data=[ModelVoices(model=w.name, voices=w.model.voices, default_voice=w.model.default_voice) for w in chosen]
        )

    def prepare(body: SpeechRequest) -> tuple[ModelWorker, str, Callable[[], Iterator[Audio]]]:
        """The checks every speech request passes before any work (model, voice, input, format, the model's
        options); the model, the text, and what makes its audio, chunk by chunk, at the volume asked for."""
        for field in ("model", "voice", "lang_code"):
            value = getattr(body, field)
            if isinstance(value, str):
                try:
                    check_unicode(value)
                except InputError as e:
                    raise ApiError(400, f"{field}: {e}", code="invalid_value", param=field) from None
        worker = worker_for(body.model)
        voice = _check_voice(worker, body.voice)
        text = _check_input(body.input, settings.max_input_chars)
        fmt = body.response_format
        if body.streaming and fmt not in STREAMABLE_FORMATS:
            raise ApiError(
                400,
                f"{fmt} cannot be streamed; stream {', '.join(STREAMABLE_FORMATS)}, or ask for {fmt} without streaming",
                code="unsupported_value",
                param="response_format",
            )
        rate_problem = unsupported_rate_message(fmt, worker.model.sample_rate)
        if rate_problem is not None:
            raise ApiError(400, rate_problem, code="unsupported_value", param="response_format")
        check_download_link(body)
        options = request_options(worker.name, worker.model, body)
        family = worker.model.family
        if settings.fast_start and body.streaming and family is not None and "fast_start" in family.option_names():
            options["fast_start"] = True
        model, volume = worker.model, body.volume

        def chunks() -> Iterator[Audio]:
            audio = model.stream(text, voice=voice, speed=body.speed, **options)
            return audio if volume == 1.0 else _at_volume(audio, volume)

        return worker, text, chunks

    async def speech(body: SpeechRequest, request: Request) -> Response:
        worker, text, chunks = prepare(body)
        model = worker.model
        fmt = body.response_format
        deadline = Deadline(settings.timeout_s, request.is_disconnected)
        headers = {"X-Sample-Rate": str(model.sample_rate)}
        started = time.monotonic()
        if body.streaming:
            return await _streamed(
                worker, text, fmt, lambda encoder: _encoded(chunks(), encoder), deadline, headers, MEDIA_TYPES[fmt]
            )
        audio = await _whole(worker.admit(len(text)), chunks, deadline)
        data = await asyncio.to_thread(audio.encode, fmt)
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
        worker, text, chunks = prepare(body)
        model = worker.model
        fmt = body.response_format
        if body.return_timestamps and not (model.family and model.family.capabilities.timestamps):
            raise ApiError(
                400,
                f"model '{worker.name}' ({model.family_name}) gives no word timestamps; "
                "ask with return_timestamps false, or use /v1/audio/speech",
                code="unsupported_value",
                param="return_timestamps",
            )
        deadline = Deadline(settings.timeout_s, request.is_disconnected)
        headers = {"X-Sample-Rate": str(model.sample_rate)}
        keep = body.return_timestamps
        if body.streaming:
            produce = lambda encoder: _captioned(chunks(), encoder, fmt=fmt, keep=keep)  # noqa: E731
            return await _streamed(worker, text, fmt, produce, deadline, headers, NDJSON, error_line=True)
        audio = await _whole(worker.admit(len(text)), chunks, deadline)
        data = await asyncio.to_thread(audio.encode, fmt)
        return JSONResponse(_caption_body(data, fmt, audio.words if keep else ()), headers=headers)

    captioned_speech.__annotations__["body"] = bodies.captioned
    for path in CAPTIONED_PATHS:
        app.post(path, response_model=None)(captioned_speech)

    @app.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html", media_type="text/html")


def _start_encoder(fmt: str, sample_rate: int) -> StreamEncoder:
    try:
        return stream_encoder(fmt, sample_rate)
    except Exception as exc:
        log.error("could not start the %s stream encoder", fmt, exc_info=exc)
        raise ApiError(
            500,
            f"could not start streaming {fmt} ({type(exc).__name__}); see the server log",
            code="encoder_failed",
        ) from exc


# OpenAI's model and voice names: clients written for OpenAI send them, often hard-coded. A model or voice loaded
# under such a name is itself; otherwise they mean the server's default model and the model's default voice (as
# Kokoro-FastAPI maps them onto its own), so those clients work unchanged.
OPENAI_MODELS = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts")
OPENAI_VOICES = ("alloy", "ash", "ballad", "coral", "echo", "fable", "onyx", "nova", "sage", "shimmer", "verse")


def _check_voice(worker: ModelWorker, voice: str | None) -> VoiceMix | None:
    """The voice to ask the model for, resolved once (the model takes it as it is), when each name in ``voice`` is
    one of the model's voices; else 400.

    A voice may be a mix of the model's voices, "a:0.6,b:0.4" ("a,b" weighs them equally): every name in it must
    be one the model lists (the family's own parser checks it), so nothing else from a request (a file path, say)
    ever reaches the model as a voice."""
    if voice is None or (voice in OPENAI_VOICES and voice not in worker.model.voices):
        voice = None  # OpenAI's voice names, which clients send by default: the model's default
    try:
        mix = worker.model.resolve_voice(voice)
    except UnknownVoiceError as e:
        voices = e.voices
        choices = f"choose one of: {', '.join(voices)}" if voices else "it has no voices; leave voice out"
        raise ApiError(
            400,
            f"voice '{e.name}' is not available for model '{worker.name}'; {choices}",
            code="voice_not_found",
            param="voice",
        ) from None
    except VoiceWeightError as e:
        raise ApiError(400, str(e), code="invalid_voice_weight", param="voice") from None
    except InputError as e:  # a blend asked of a family that cannot blend
        raise ApiError(400, str(e), code="invalid_voice", param="voice") from None
    return mix


def _check_input(text: str, max_chars: int) -> str:
    if len(text) > max_chars:
        raise ApiError(
            413,
            f"input is {len(text)} characters long; this server takes at most {max_chars} per request: "
            "split the text into several requests",
            code="input_too_long",
            param="input",
        )
    if not text.strip():
        raise ApiError(400, "input is empty; give the text to speak", code="empty_input", param="input")
    try:
        return check_unicode(text)
    except InputError as e:
        raise ApiError(400, f"input: {e}", code="invalid_input", param="input") from None


def _at_volume(chunks: Iterator[Audio], volume: float) -> Iterator[Audio]:
    """The chunks with their samples times ``volume`` (``volume_multiplier``), clipped to [-1, 1]; closing it
    closes ``chunks`` (which stops synthesis on the model's thread)."""
    try:
        for chunk in chunks:
            yield dataclasses.replace(chunk, samples=np.clip(chunk.samples * volume, -1.0, 1.0))
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()


def _synthesis_error(exc: Exception) -> ApiError:
    """What the client is told when synthesis raised ``exc``."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, InputError):
        return ApiError(400, str(exc), code="invalid_input")
    if isinstance(exc, GGTTSError):
        return ApiError(500, f"synthesis failed: {exc}", code="synthesis_failed")
    log.error("synthesis failed", exc_info=exc)
    return ApiError(500, f"synthesis failed ({type(exc).__name__}); see the server log", code="synthesis_failed")


async def _whole(ticket: Ticket, chunks: Callable[[], Iterator[Audio]], deadline: Deadline) -> Audio:
    steps: Steps[Audio] | None = None
    parts: list[Audio] = []
    try:
        await ticket.take_turn(deadline)
        steps = Steps(ticket, chunks, deadline)
        while (part := await steps.next()) is not None:
            parts.append(part)
    except (ApiError, ClientGone):
        raise
    except Exception as exc:
        raise _synthesis_error(exc) from exc
    finally:
        if steps is not None:
            steps.close()
        else:
            ticket.release()
    if not parts:
        return Audio(np.zeros(0, dtype=np.float32), ticket.worker.model.sample_rate)
    return Audio.concatenate(parts)


def _caption_body(data: bytes, fmt: str, words: Sequence[WordTiming]) -> dict[str, object]:
    return {
        "audio": base64.b64encode(data).decode("ascii"),
        "audio_format": MEDIA_TYPES[fmt],
        "timestamps": [
            {"word": w.text, "start_time": round(w.start, 3), "end_time": round(w.end, 3)}
            for w in words
            if not w.continues  # streamed: the rest of a word the line before began (its start is what counts)
        ],
    }


def _captioned(chunks: Iterator[Audio], encoder: StreamEncoder, *, fmt: str, keep: bool) -> Iterator[bytes]:
    """Runs on the model's thread: one JSON line per chunk, its encoded audio and its words (see
    ``captioned_speech``); the encoder's last bytes come in a line of their own."""
    for data, words in _encoded_with_words(chunks, encoder):
        yield json.dumps(_caption_body(data, fmt, words if keep else ()), ensure_ascii=False).encode() + b"\n"


Encoded = Iterator[tuple[bytes, Sequence[WordTiming]]]


def _encoded_with_words(chunks: Iterator[Audio], encoder: StreamEncoder) -> Encoded:
    """Each chunk's encoded bytes (the format's header in front of the first) and its words; the encoder's last
    bytes with no words."""
    head = encoder.start()
    for chunk in chunks:
        yield head + encoder.feed(chunk), chunk.words
        head = b""
    yield head + encoder.finish(), ()


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
    error_line: bool = False,
) -> Response:
    """A streamed response of ``produce(encoder)``'s pieces: waits for the first (so early failures still get an
    error status), then streams the rest; the ``fmt`` encoder is closed at the end, whatever happens. A failure
    after the first piece cuts the connection (the status is sent); with ``error_line`` (NDJSON) the error's JSON
    body goes out first, as a line of its own."""
    # Built before a queue place is taken: a failure here has no ticket to give back.
    encoder = _start_encoder(fmt, worker.model.sample_rate)
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
            raise _synthesis_error(exc) from exc
        raise
    # The deadline goes on polling for a disconnect while each step runs: Starlette (ASGI 2.4) only notices one
    # when a send fails, which would be after the chunk in progress, however long it takes.
    body_iterator = _stream_body(first, steps, encoder, error_line)
    return AbortableStreamingResponse(body_iterator, media_type=media_type, headers=headers)


class StreamAborted(Exception):
    """Synthesis failed after the response had started: the connection is cut so the client sees a broken
    transfer rather than audio that merely looks short."""


async def _stream_body(
    first: bytes, steps: Steps[bytes], encoder: StreamEncoder, error_line: bool = False
) -> AsyncIterator[bytes]:
    try:
        yield first
        while (data := await steps.next()) is not None:
            if data:
                yield data
    except ClientGone:
        raise StreamAborted("the client left") from None
    except Exception as exc:
        error = _synthesis_error(exc)
        log.warning("stream cut after it started: %s", error.message)
        if error_line:  # the client reading lines learns why, before the cut
            yield json.dumps(error.body(), ensure_ascii=False).encode() + b"\n"
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
