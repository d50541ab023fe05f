"""``ggtts wyoming``: the served models as text-to-speech programs of the Wyoming protocol (Home Assistant).

Each model is one TTS program (its name is the model's), each of its voices a Wyoming voice with the languages
it speaks where the model knows them. Where several models are served, a first program, ``ggtts``, holds every
model's voices: Home Assistant uses a server's first program only. A connection speaks with the first program
unless it sends ``select-program``; a ``synthesize`` naming a voice of another served model uses that model.

- ``describe`` -> ``info``.
- ``synthesize`` -> ``audio-start``, ``audio-chunk``s as each chunk is spoken, ``audio-stop``.
- Streaming, as Home Assistant sends an LLM's reply: ``synthesize-start``, ``synthesize-chunk``s (text pieces),
  ``synthesize`` (sent for older servers: ignored inside a stream), ``synthesize-stop``. Each stretch of text is
  spoken as soon as it is complete (:class:`ggtts.text.incremental.TextStream`: the first at a clause, then at
  sentences), each as an ``audio-start`` / ``audio-chunk``s / ``audio-stop`` cycle, then ``synthesize-stopped``
  (as wyoming-piper does, so clients written for it work).
- Bad input (an unknown voice or program, empty or over-long text, a model failing) is one ``error`` event with
  the message and code the HTTP API would give; the connection stays usable.
- Connections are bounded as the HTTP server's are: at ``--max-connections``, a new one takes the place of the
  one that has waited longest for an event (after a grace of a quarter second), or, if none waits, gets one
  ``error`` event and is closed; a client that takes none of the audio sent to it for ``--send-timeout`` seconds is cut
  off (its model's turn passes on); one that sends no whole event within ``--request-timeout`` seconds of
  connecting or of its last answer is closed (silent, half-sent and trickled events alike); events longer than
  any valid request are refused unread.

Requests go through the same checks and model queues as the HTTP server (:class:`ggtts.server.speaking.Speaker`):
one utterance at a time per model, at most ``--max-queue`` waiting, each within ``--timeout`` seconds.
The ``wyoming`` package frames the events.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.error import Error
from wyoming.event import Event
from wyoming.info import Attribution, Describe, Info, SelectProgram, TtsProgram, TtsVoice
from wyoming.server import AsyncEventHandler, AsyncServer
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop, SynthesizeStopped

from ggtts import __version__
from ggtts.server.connections import REFUSED_LINGER_S, IdleConnections, note_refused, prepare_for_connections
from ggtts.server.errors import ApiError
from ggtts.server.settings import DEFAULT_IDLE_GRACE_S, DEFAULT_WYOMING_URI, ServerSettings
from ggtts.server.speaking import NOTHING_TO_SAY, Speaker, spoken
from ggtts.server.worker import Deadline
from ggtts.text.incremental import TextStream

if TYPE_CHECKING:
    from wyoming.tts import SynthesizeVoice

    from ggtts.api import TTSModel

log = logging.getLogger("ggtts.wyoming")

SAMPLES_PER_CHUNK = 1024  # samples per audio-chunk event (wyoming-piper's default)
# The program of every served model's voices, first where several are served: Home Assistant speaks with the first
# program of a server's info only (and lists its voices under their languages), as wyoming-piper's one program.
EVERY_MODEL = "ggtts"
SAMPLE_WIDTH = 2  # bytes: 16-bit PCM
ATTRIBUTION = Attribution(name="ggtts", url="")  # no address of its own to give


def describe(speaker: Speaker) -> Info:
    """Every served model as a TTS program, its voices with their languages; where several are served, first a
    program of them all (:data:`EVERY_MODEL`)."""
    programs = [
        _program(name, f"{worker.model.family_name} ({worker.model.architecture}, {worker.model.sample_rate} Hz)",
                 [_voice(worker.model, name, voice, with_model=False) for voice in _voice_names(name, worker.model)])
        for name, worker in speaker.workers.items()
    ]  # fmt: skip
    if has_every_model_program(speaker):
        seen: set[str] = set()
        voices = []
        for name, worker in speaker.workers.items():
            for voice in _voice_names(name, worker.model):
                if voice not in seen:  # a name two models share is the first's, as a synthesize naming it is
                    seen.add(voice)
                    voices.append(_voice(worker.model, name, voice, with_model=True))
        programs.insert(0, _program(EVERY_MODEL, f"every model served: {', '.join(speaker.workers)}", voices))
    return Info(tts=programs)


def has_every_model_program(speaker: Speaker) -> bool:
    """Whether ``info`` begins with :data:`EVERY_MODEL`: several models served, none of them named so."""
    return len(speaker.workers) > 1 and EVERY_MODEL not in speaker.workers


def _voice_names(name: str, model: TTSModel) -> list[str]:
    return model.voices or [name]  # a model without voices: one voice, named as the model


def _program(name: str, description: str, voices: list[TtsVoice]) -> TtsProgram:
    return TtsProgram(
        name=name,
        attribution=ATTRIBUTION,
        installed=True,
        description=f"{description}, served by ggtts",
        version=__version__,
        voices=voices,
        supports_synthesize_streaming=True,
    )


def _voice(model: TTSModel, model_name: str, voice: str, with_model: bool) -> TtsVoice:
    description = model.voice_description(voice) + (f" · {model_name}" if with_model else "")
    return TtsVoice(
        name=voice,
        attribution=ATTRIBUTION,
        installed=True,
        description=description,
        version=None,
        languages=model.voice_languages(voice),
    )


class BoundedReader:
    """The connection's stream for the ``wyoming`` library's event reader, refusing an event whose data or payload
    says it is longer than ``limit`` bytes before reading it (the reader would otherwise read it whole into
    memory): the reader takes the refusal (a ValueError) as the end of the connection.

    With ``idle_s``, each event must arrive whole within ``idle_s`` seconds of the reader asking for it (the
    handler asks when the connection opens and when it has answered the last event): a silent client, one that
    sends half an event, or one that trickles it byte by byte is closed (a TimeoutError), as HTTP's
    ``--request-timeout`` closes its connections. The event's first line starts the clock."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        limit: int,
        idle_s: float | None = None,
        waiting: Callable[[], None] | None = None,
    ) -> None:
        self._reader = reader
        self.limit = limit
        self.idle_s = idle_s
        self.waiting = waiting  # called as the wait for an event begins
        self._due = 0.0  # when the event being read must be whole (the loop's clock)

    async def readline(self) -> bytes:
        if self.waiting is not None:
            self.waiting()
        if self.idle_s is not None:
            self._due = asyncio.get_running_loop().time() + self.idle_s
        return await self._within(self._reader.readline())  # the stream's own line limit (64 KiB) holds here

    def __getattr__(self, name: str) -> Any:  # the rest (feed_eof, which the handler's stop() calls): the stream's
        return getattr(self._reader, name)

    async def readexactly(self, n: int) -> bytes:
        if n > self.limit:
            log.warning("closing a connection that announced a %d-byte event (limit %d)", n, self.limit)
            raise ValueError(f"an event of {n} bytes is more than this server reads ({self.limit})")
        return await self._within(self._reader.readexactly(n))

    async def _within(self, read: Coroutine[Any, Any, bytes]) -> bytes:
        if self.idle_s is None:
            return await read
        try:
            return await asyncio.wait_for(read, self._due - asyncio.get_running_loop().time())
        except TimeoutError:
            log.info("closing a connection that sent no whole event in %g s", self.idle_s)
            raise


@dataclass
class OpenConnections:
    """How many connections a server has open (its handlers count themselves in and out): served, and refused
    but still open (their clients reading the refusal); and which of the served wait for an event."""

    count: int = 0
    refusing: int = 0
    idle: IdleConnections = field(default_factory=lambda: IdleConnections(DEFAULT_IDLE_GRACE_S))


class GGTTSEventHandler(AsyncEventHandler):
    """One client connection."""

    def __init__(
        self,
        speaker: Speaker,
        info: Info,
        connections: OpenConnections,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        idle_s: float | None = None,
    ) -> None:
        loop = asyncio.get_running_loop()
        bounded = BoundedReader(
            reader, speaker.settings.max_body_bytes, idle_s, lambda: connections.idle.waiting(self, loop.time())
        )
        super().__init__(bounded, writer)  # type: ignore[arg-type]
        self.speaker = speaker
        self.info = info
        self.connections = connections
        self.program = speaker.default_model
        self.every_model = has_every_model_program(speaker)  # the first program: a voice of any model, by language too
        self._stream: TextStream | None = None  # inside synthesize-start ... synthesize-stop
        self._stream_voice: SynthesizeVoice | None = None
        self._stream_failed = False  # an error was sent: the rest of the stream is ignored until its stop

    async def run(self) -> None:
        """Serve the connection's events, if the server has room for one more connection."""
        limit = self.speaker.settings.max_connections
        now = asyncio.get_running_loop().time()
        if self.connections.count >= limit and not self.connections.idle.make_room(now, limit, _close_idle):
            note_refused(limit)
            lingering = self.connections.refusing < limit  # at most the cap's worth of refusals wait for clients
            self.connections.refusing += 1
            try:
                with contextlib.suppress(OSError, TimeoutError):
                    message = f"this server has its limit of {limit} connections open; retry in a moment"
                    await self.write_event(Error(text=message, code="too_many_connections").event())
                    # as the HTTP server refuses: the client that already sent its request reads the refusal, not
                    # a reset for its unread bytes; it has REFUSED_LINGER_S to close its side
                    if lingering and self.writer.can_write_eof():
                        self.writer.write_eof()
                        await asyncio.wait_for(self._read_to_end(), REFUSED_LINGER_S)
            finally:
                self.connections.refusing -= 1
            self.writer.close()
            return
        self.connections.count += 1
        try:
            await super().run()
        except (OSError, EOFError):  # cut off while reading (a reset, gone inside an event's data, or no whole event
            pass  # within the request timeout: a TimeoutError); sending ends in handle_event
        except (TypeError, AttributeError, KeyError, ValueError, RecursionError) as exc:
            # the wyoming reader meets an event header or data that is not a JSON object: the connection ends, as
            # the reader ends it itself for data that is not JSON at all
            log.info("closing a connection that sent an event this server cannot read (%s)", type(exc).__name__)
        finally:
            self.connections.count -= 1
            self.connections.idle.busy(self)

    async def _read_to_end(self) -> None:
        while await self.reader.read(4096):  # type: ignore[attr-defined]  # the stream's, through BoundedReader
            pass

    async def write_event(self, event: Event) -> None:
        """Send ``event``; a client that takes none of it for the send timeout is cut off (an OSError)."""
        timeout = self.speaker.settings.send_timeout_s
        try:
            await asyncio.wait_for(super().write_event(event), timeout)
        except TimeoutError:
            log.warning("cutting a connection whose client took nothing for %g s (the send timeout)", timeout)
            self.writer.transport.abort()  # close() would wait for the buffer to drain, which is not happening
            raise ConnectionAbortedError(f"the client took nothing for {timeout:g} s") from None

    async def handle_event(self, event: Event) -> bool:
        self.connections.idle.busy(self)  # at work until it waits for the next event
        try:
            if Describe.is_type(event.type):
                await self.write_event(self.info.event())
                return True
            try:
                await self._handle(event)
            except ApiError as error:
                await self._error(error.message, error.code)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:  # the event's data is not what it says
                await self._error(f"a {event.type} event with data this server cannot read ({exc})", "bad_event")
        except OSError:  # the client left, or took nothing for the send timeout, while audio was being sent
            return False
        return True

    async def _error(self, message: str, code: str) -> None:
        log.info("refused: %s", message)
        await self.write_event(Error(text=message, code=code).event())
        if self._stream is not None:
            self._stream_failed = True  # what else the client streams is dropped; synthesize-stop still answers

    async def _handle(self, event: Event) -> None:
        if SelectProgram.is_type(event.type):
            name = SelectProgram.from_event(event).name
            self.every_model = name == EVERY_MODEL and has_every_model_program(self.speaker)
            if self.every_model:
                self.program = self.speaker.default_model
            else:
                self.program = self.speaker.worker_for(name).name  # 404-like error for a program not served
        elif SynthesizeStart.is_type(event.type):
            self._stream_voice, self._stream_failed = None, False
            self._stream = self.speaker.text_stream(self.program)  # (a voice refused below: its chunks dropped)
            _check_voice_data(event)
            self._stream_voice = SynthesizeStart.from_event(event).voice
            # the stream of the model the voice asks for (a voice whose data this server cannot read is one error
            # here, and the stream is dropped until synthesize-stop, as after any refused stretch)
            self._stream = self.speaker.text_stream(self._model_for(self._stream_voice)[0])
        elif SynthesizeChunk.is_type(event.type):
            if self._stream is None:
                raise ApiError(400, "synthesize-chunk outside synthesize-start ... synthesize-stop", code="bad_event")
            if self._stream_failed:
                return
            piece = SynthesizeChunk.from_event(event).text
            if not isinstance(piece, str):
                raise ApiError(400, "synthesize-chunk: its text is not a string", code="bad_event")
            if len(self._stream.pending) + len(piece) > self.speaker.settings.max_input_chars:
                raise ApiError(
                    413,
                    f"more than {self.speaker.settings.max_input_chars} characters are waiting to be spoken",
                    code="input_too_long",
                )
            for stretch in self._stream.feed(piece):
                await self._speak_stretch(stretch, self._stream_voice)
        elif SynthesizeStop.is_type(event.type):
            if self._stream is None:
                raise ApiError(400, "synthesize-stop without synthesize-start", code="bad_event")
            stream, failed, self._stream, self._stream_failed = self._stream, self._stream_failed, None, False
            try:
                for stretch in [] if failed else stream.flush():
                    await self._speak_stretch(stretch, self._stream_voice)
            except ApiError as error:
                await self._error(error.message, error.code)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:  # the voice's data is not what it says
                await self._error(f"a synthesize-start event with data this server cannot read ({exc})", "bad_event")
            await self.write_event(SynthesizeStopped().event())  # after an error too: clients read until it
        elif Synthesize.is_type(event.type):
            if self._stream is not None:
                return  # the whole text, sent inside a stream for servers that do not stream: already spoken
            _check_voice_data(event)
            synthesize = Synthesize.from_event(event)
            await self._speak(synthesize.text, synthesize.voice, close_cycle=False)
        # other events (audio, transcripts, pings a client may send) are not for a TTS server: ignored

    def _body(self, text: str, voice: SynthesizeVoice | None) -> Any:
        """The speech request a ``synthesize`` makes (:meth:`_model_for`)."""
        model_name, voice_name = self._model_for(voice)
        return self.speaker.bodies.speech(model=model_name, input=text, voice=voice_name, response_format="pcm")

    def _model_for(self, voice: SynthesizeVoice | None) -> tuple[str, str | None]:
        """The model and voice a ``synthesize`` asks for: the connection's program, or the served model that has
        the voice asked for; the voice (or a speaker of it, or one speaking the language asked for)."""
        model_name, voice_name = self.program, None
        if voice is not None:
            # a speaker of the voice first (ggtts lists a multi-speaker file's speakers as its voices)
            for wanted in (voice.speaker, voice.name):
                if wanted:
                    model_name, voice_name = self._model_with_voice(wanted)
                    if voice_name is None or voice_name in self.speaker.workers[model_name].model.voices:
                        break
            if voice_name is None and voice.language:
                models = [model_name, *(self.speaker.workers if self.every_model else ())]
                model_name, voice_name = next(
                    ((name, found) for name in models if (found := self._voice_for_language(name, voice.language))),
                    (model_name, None),
                )
        return model_name, voice_name

    def _model_with_voice(self, voice: str) -> tuple[str, str | None]:
        """The model that has ``voice`` (the connection's program first), else the program with the voice left to
        its checks (an error naming the program's voices). A model without voices answers to its own name."""
        workers = self.speaker.workers
        for name in (self.program, *workers):
            model = workers[name].model
            if voice in model.voices:
                return name, voice
            if not model.voices and voice == name:
                return name, None
        return self.program, voice

    def _voice_for_language(self, model_name: str, language: str) -> str | None:
        wanted = language.replace("-", "_").lower()
        model = self.speaker.workers[model_name].model
        for voice in model.voices:
            codes = [c.lower() for c in model.voice_languages(voice)]
            if wanted in codes or any(c.split("_")[0] == wanted.split("_")[0] for c in codes):
                return voice
        return None

    async def _speak_stretch(self, text: str, voice: SynthesizeVoice | None) -> None:
        """A stretch of streamed text: spoken, or passed over where it has no word to read aloud (a Markdown rule,
        a lone bullet: a reply's next sentences still come)."""
        try:
            await self._speak(text, voice)
        except ApiError as error:
            if error.code != NOTHING_TO_SAY:
                raise
            log.info("passed over a stretch with nothing to say (%r)", text[:40])

    async def _speak(self, text: str, voice: SynthesizeVoice | None, close_cycle: bool = True) -> None:
        """One utterance: audio-start, its chunks as they are made (in events of ``SAMPLES_PER_CHUNK``), audio-stop.
        A failure after audio-start (a timeout, say): with ``close_cycle`` (a stretch of a stream, whose client reads
        until synthesize-stopped), audio-stop, then its error; else (a ``synthesize``, whose client reads until
        audio-stop and would play the audio cut short as if whole) its error, then the connection is closed."""
        prepared = self.speaker.prepare(self._body(text, voice), streaming=True)
        rate = prepared.worker.model.sample_rate
        started = False
        deadline = Deadline(self.speaker.settings.timeout_s)
        try:
            async with contextlib.aclosing(spoken(prepared, deadline)) as chunks:
                async for chunk in chunks:
                    if not started:
                        await self.write_event(AudioStart(rate=rate, width=SAMPLE_WIDTH, channels=1).event())
                        started = True
                    pcm = chunk.pcm16()
                    step = SAMPLES_PER_CHUNK * SAMPLE_WIDTH
                    for at in range(0, len(pcm), step):
                        piece = pcm[at : at + step]
                        audio = AudioChunk(rate=rate, width=SAMPLE_WIDTH, channels=1, audio=piece)
                        await self.write_event(audio.event())
        except ApiError as error:
            if started and close_cycle:  # the cycle ends, then the error says why it was short
                await self.write_event(AudioStop().event())
            elif started:
                await self._error(error.message, error.code)
                raise OSError("the audio was cut short: the connection ends with its error") from None
            raise
        if not started:  # nothing to say (the model made no audio): still one complete cycle
            await self.write_event(AudioStart(rate=rate, width=SAMPLE_WIDTH, channels=1).event())
        await self.write_event(AudioStop().event())


def _check_voice_data(event: Event) -> None:
    """A 400 for a voice that is not an object (the library would take a string for no voice at all)."""
    voice = (event.data or {}).get("voice")
    if voice is not None and not isinstance(voice, dict):
        raise ApiError(
            400, f'{event.type}: its voice is an object ({{"name": ...}}, {{"language": ...}}), not {voice!r}',
            code="bad_event",
        )  # fmt: skip


def _close_idle(handler: GGTTSEventHandler) -> None:
    handler.writer.close()  # its reader sees the end of the connection, and the handler ends


async def run_server(uri: str, speaker: Speaker, ready: asyncio.Event | None = None) -> None:
    """Serves until cancelled."""
    server = AsyncServer.from_uri(uri)
    info = describe(speaker)
    log.info("Wyoming server on %s: %s", uri, ", ".join(speaker.workers))
    if ready is not None:
        ready.set()
    try:
        # stdio:// serves the one process that started this one: no idle timeout there
        idle_s = None if uri.startswith("stdio:") else speaker.settings.request_timeout_s
        connections = OpenConnections(idle=IdleConnections(speaker.settings.idle_grace_s))
        await server.run(partial(GGTTSEventHandler, speaker, info, connections, idle_s=idle_s))
    finally:
        speaker.shutdown()


def serve(
    models: Mapping[str, TTSModel | Sequence[TTSModel]], settings: ServerSettings, uri: str = DEFAULT_WYOMING_URI
) -> None:
    """Serve already loaded models over Wyoming until interrupted."""
    prepare_for_connections(settings.max_connections)
    speaker = Speaker(models, settings)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run_server(uri, speaker))
