"""What every speech request passes before any work, whichever door it came in by (HTTP, the WebSocket of
incremental text, Wyoming), and how one utterance is spoken on its model's thread.

:class:`Speaker` holds the served models (a :class:`~ggtts.server.worker.ModelWorker` per copy), the server's
settings and its request bodies (the served families' options inside); :meth:`Speaker.prepare` checks a request
body (model, voice, input, format, options) and gives back what makes its audio; :func:`spoken` runs that on the
model's thread in the request's turn, a chunk at a time.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncGenerator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from ggtts.api import TTSModel
from ggtts.audio import Audio
from ggtts.errors import GGTTSError, InputError
from ggtts.families.base import Family, NothingToSay, UnknownVoiceError, VoiceMix, VoiceWeightError, check_unicode
from ggtts.runtime.device import device_memory_error
from ggtts.server.errors import ApiError
from ggtts.server.options import RequestBodies, request_bodies, request_options
from ggtts.server.schemas import SpeechRequest
from ggtts.server.settings import ServerSettings
from ggtts.server.streaming import STREAMABLE_FORMATS, StreamEncoder, stream_encoder, unsupported_rate_message
from ggtts.server.validation import check_download_link
from ggtts.server.worker import ClientGone, Deadline, ModelWorker, Steps
from ggtts.text.incremental import FIRST_CLAUSE_MIN_WORDS, MAX_CHARS, TextStream

log = logging.getLogger("ggtts.server")
NOTHING_TO_SAY = "nothing_to_say"  # the code of a text without a word to read aloud (a Markdown rule, "...")
OUT_OF_MEMORY_RETRY_S = 5  # Retry-After of a request the GPU had no memory for (one too big fails again)
T = TypeVar("T")

# OpenAI's model and voice names: clients written for OpenAI send them, often hard-coded. A model or voice loaded
# under such a name is itself; otherwise they mean the server's default model and the model's default voice (as
# Kokoro-FastAPI maps them onto its own), so those clients work unchanged.
OPENAI_MODELS = ("tts-1", "tts-1-hd", "gpt-4o-mini-tts", "gpt-4o-mini-tts-2025-12-15")
OPENAI_VOICES = (
    *("alloy", "ash", "ballad", "coral", "echo", "fable", "onyx", "nova", "sage", "shimmer", "verse", "marin"),
    "cedar",
)


def check_voice(worker: ModelWorker, voice: str | None) -> VoiceMix | None:
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


def check_input(text: str, max_chars: int) -> str:
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


def check_for_family(family: Family, text: str, speed: float) -> None:
    """A 413 for text over the family's own limit (under the server's), a 400 for a speed it does not take: found
    here, not once the request's turn has come (a busy server would have answered 503 or 504 first)."""
    limit = family.capabilities.max_input_chars
    if len(text) > limit:
        raise ApiError(
            413,
            f"input is {len(text)} characters long; {family.name} takes at most {limit} per request: split the text "
            "into several requests",
            code="input_too_long",
            param="input",
        )
    try:
        family.check_speed(speed)
    except InputError as e:
        raise ApiError(400, str(e), code="unsupported_value", param="speed") from None


def synthesis_error(exc: Exception) -> ApiError:
    """What the client is told when synthesis raised ``exc``."""
    if isinstance(exc, ApiError):
        return exc
    if isinstance(exc, NothingToSay):  # (text that arrives in pieces passes over such a stretch: NOTHING_TO_SAY)
        return ApiError(400, str(exc), code=NOTHING_TO_SAY)
    if isinstance(exc, InputError):
        return ApiError(400, str(exc), code="invalid_input")
    if isinstance(exc, GGTTSError):
        return ApiError(500, f"synthesis failed: {exc}", code="synthesis_failed")
    memory = device_memory_error(exc, "synthesis", "try again later, or with shorter input")
    if memory is not None:  # the GPU's memory, taken by what ran beside it: the next request may fit
        log.warning("%s", memory)
        return ApiError(503, str(memory), code="out_of_memory", headers={"Retry-After": str(OUT_OF_MEMORY_RETRY_S)})
    log.error("synthesis failed", exc_info=exc)
    return ApiError(500, f"synthesis failed ({type(exc).__name__}); see the server log", code="synthesis_failed")


@dataclass(frozen=True)
class Prepared:
    """A checked speech request: the worker of its model, its text, and what makes its audio chunk by chunk."""

    worker: ModelWorker
    text: str
    chunks: Callable[[], Iterator[Audio]]


class Speaker:
    """The served models under their names (the first is the default), the server's settings and request
    bodies; the checks of :meth:`prepare` are the same for every protocol.

    A name may stand for several copies of a model (``replicas``), each with its own thread and queue: a request
    goes to the copy with the fewest requests on it, so that many run at once. ``workers`` holds each name's first
    copy (what describes the model); ``replicas`` all of them."""

    def __init__(self, models: Mapping[str, TTSModel | Sequence[TTSModel]], settings: ServerSettings) -> None:
        if not models:
            raise ValueError("the server needs at least one model")
        self.settings = settings
        self.replicas: dict[str, list[ModelWorker]] = {}
        for name, served in models.items():
            copies = [served] if isinstance(served, TTSModel) else list(served)
            if not copies:
                raise ValueError(f"model '{name}' has no copy to serve")
            self.replicas[name] = [ModelWorker(name, m, settings.max_queue, settings.model_threads) for m in copies]
        self.workers = {name: copies[0] for name, copies in self.replicas.items()}
        self.default_model = next(iter(self.workers))
        self.bodies: RequestBodies = request_bodies(w.model.family for w in self.workers.values())

    def _means_default(self, name: str | None) -> bool:
        """Whether model ``name`` stands for the default model: none, or one of OpenAI's names (which clients send
        by default) that no served model is loaded under."""
        return name is None or (name in OPENAI_MODELS and name not in self.workers)

    def worker_for(self, name: str | None) -> ModelWorker:
        if self._means_default(name):
            name = self.default_model
        if name not in self.workers:
            raise ApiError(
                404,
                f"model '{name}' is not loaded on this server; available: {', '.join(self.workers)}",
                code="model_not_found",
                param="model",
            )
        return min(self.replicas[name], key=lambda w: w.admitted)  # the least loaded copy (the first on a tie)

    def model_for_voice(self, model: str | None, voice: str | None) -> str | None:
        """The model a request asks for: ``model``, unless it stands for the default model (none, or one of OpenAI's
        names) and ``voice`` is not the default model's but another served model's: then the first such model.
        Open WebUI sends the choice of its voice menu (``/v1/audio/voices``: every model's) with OpenAI's model name,
        as Wyoming's clients send a voice alone."""
        if voice is None or not self._means_default(model):
            return model
        if voice in self.workers[self.default_model].model.voices:
            return model
        return next((name for name, w in self.workers.items() if voice in w.model.voices), model)

    def text_stream(self, model_name: str | None) -> TextStream:
        """A stream of text arriving in pieces, to be spoken by the model ``model_name`` stands for
        (:meth:`worker_for`): its first stretch may end at a clause as short as the model's family allows (Kokoro's
        stream speaks a first clause alone anyway), or however short with the server's ``fast_start`` (a first
        clause of one word, "Sure,", is then its own utterance: spoken once the next word begins, at the cost of
        the prosody it would have had within its sentence); no stretch longer than the server's input limit."""
        family = self.worker_for(model_name).model.family
        words = family.capabilities.first_clause_words if family else FIRST_CLAUSE_MIN_WORDS
        if self.settings.fast_start:
            words = 1
        return TextStream(first_clause_min_words=words, max_chars=min(MAX_CHARS, self.settings.max_input_chars))

    def health(self, name: str) -> tuple[bool, int]:
        """Whether every copy of model ``name`` is busy (a request would wait), and how many requests wait."""
        copies = self.replicas[name]
        return all(w.busy for w in copies), sum(w.waiting for w in copies)

    def prepare(self, body: SpeechRequest, *, streaming: bool) -> Prepared:
        """The checks every speech request passes before any work (model, voice, input, format, the model's
        options): 4xx ``ApiError`` at the first problem. ``streaming``: the audio will be sent as it is made."""
        for field in ("model", "voice", "lang_code"):
            value = getattr(body, field)
            if isinstance(value, str):
                try:
                    check_unicode(value)
                except InputError as e:
                    raise ApiError(400, f"{field}: {e}", code="invalid_value", param=field) from None
        worker = self.worker_for(self.model_for_voice(body.model, body.voice_name))
        voice = check_voice(worker, body.voice_name)
        text = check_input(body.input, self.settings.max_input_chars)
        fmt = body.response_format
        if streaming and fmt not in STREAMABLE_FORMATS:
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
        if family is not None:  # what the model's family always refuses, refused before the request waits its turn
            check_for_family(family, text, body.speed)
        if body.instructions:
            if family is None or "instructions" not in family.option_names():
                raise ApiError(
                    400,
                    f"model '{worker.name}' ({worker.model.family_name}) cannot follow instructions on how to speak; "
                    "leave instructions out (or empty)",
                    code="unsupported_value",
                    param="instructions",
                )
            options["instructions"] = body.instructions
        if self.settings.fast_start and streaming and family is not None and "fast_start" in family.option_names():
            options["fast_start"] = True
        model, volume, speed = worker.model, body.volume, body.speed

        def chunks() -> Iterator[Audio]:
            audio = model.stream(text, voice=voice, speed=speed, **options)
            return audio if volume == 1.0 else at_volume(audio, volume)

        return Prepared(worker, text, chunks)

    def shutdown(self) -> None:
        for copies in self.replicas.values():
            for worker in copies:
                worker.shutdown()


def start_encoder(fmt: str, sample_rate: int) -> StreamEncoder:
    """The ``fmt`` stream encoder, or a 500 that says it could not start (the log has why)."""
    try:
        return stream_encoder(fmt, sample_rate)
    except Exception as exc:
        log.error("could not start the %s stream encoder", fmt, exc_info=exc)
        raise ApiError(
            500,
            f"could not start streaming {fmt} ({type(exc).__name__}); see the server log",
            code="encoder_failed",
        ) from exc


def at_volume(chunks: Iterator[Audio], volume: float) -> Iterator[Audio]:
    """The chunks with their samples times ``volume`` (``volume_multiplier``), clipped to [-1, 1]; closing it
    closes ``chunks`` (which stops synthesis on the model's thread)."""
    try:
        for chunk in chunks:
            yield dataclasses.replace(chunk, samples=np.clip(chunk.samples * volume, -1.0, 1.0))
    finally:
        close = getattr(chunks, "close", None)
        if close is not None:
            close()


async def spoken(prepared: Prepared, deadline: Deadline) -> AsyncGenerator[Audio, None]:
    """The audio of a prepared request, chunk by chunk as the model's thread makes it, in the request's turn on
    its model (a 503 when the queue is full); a failure is an ``ApiError`` (:func:`synthesis_error`). Closing the
    generator early cancels the chunk being made and passes the turn on."""
    async for part in stepped(prepared.worker, prepared.chunks, deadline, len(prepared.text)):
        yield part


async def stepped(
    worker: ModelWorker, factory: Callable[[], Iterator[T]], deadline: Deadline, chars: int
) -> AsyncGenerator[T, None]:
    """The items of ``factory()``, each made on ``worker``'s thread in the request's turn (``chars``: its size, for
    the queue's estimate of the wait), as :func:`spoken` makes audio."""
    ticket = worker.admit(chars)
    steps: Steps[T] | None = None
    try:
        await ticket.take_turn(deadline)
        steps = Steps(ticket, factory, deadline)
        while (part := await steps.next()) is not None:
            yield part
    except (ApiError, ClientGone):
        raise
    except Exception as exc:
        raise synthesis_error(exc) from exc
    finally:
        if steps is not None:
            steps.close()
        else:
            ticket.release()
