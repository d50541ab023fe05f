"""Request and response bodies of the HTTP API, shaped like OpenAI's audio API."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ggtts.api import MAX_SPEED, MIN_SPEED
from ggtts.server.streaming import STREAMABLE_FORMATS
from ggtts.text.normalize import Normalization

AudioFormat = Literal["wav", "mp3", "opus", "aac", "flac", "pcm"]
DEFAULT_FORMAT: AudioFormat = "mp3"  # OpenAI's default
# Kokoro-FastAPI's formats for a file it keeps for download; ggtts keeps none (return_download_link is refused)
DownloadFormat = Literal["mp3", "opus", "aac", "flac", "wav", "pcm"]
MAX_VOLUME = 10.0  # volume_multiplier's largest: 20 dB louder, far into clipping for speech at a normal level

MEDIA_TYPES: dict[str, str] = {
    "wav": "audio/wav",
    "mp3": "audio/mpeg",
    "opus": "audio/ogg; codecs=opus",
    "aac": "audio/aac",
    "flac": "audio/flac",
    "pcm": "audio/pcm",
}
EVENT_STREAM = "text/event-stream"


class NormalizationOptions(BaseModel):
    """Kokoro-FastAPI's ``normalization_options``, with its defaults: switches for ggtts's English text normalizer
    (:class:`ggtts.text.normalize.Normalization`), and one of ggtts's own (``markdown_normalization``). A flag left
    out of the object takes the default below, as there; without the object a model normalizes as it always does
    (ggtts reads units, Kokoro-FastAPI does not).

    Kokoro-FastAPI's clients send the object, every flag written out at its default, when their user chose nothing,
    so which flags were sent (pydantic's ``model_fields_set``) cannot tell a choice from none: only the values can.
    A model without normalization options takes the defaults, sent or left out, as no choice (see
    :meth:`are_defaults`)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    normalize: bool = Field(default=True, description="normalize at all; false: the text goes to the G2P as written")
    unit_normalization: bool = Field(default=False, description="read units: '10KB' -> '10 kilobytes'")
    url_normalization: bool = Field(default=True, description="read URLs: 'example.com' -> 'example dot com'")
    email_normalization: bool = Field(default=True, description="read e-mail addresses")
    optional_pluralization_normalization: bool = Field(default=True, description="'file(s)' -> 'files'")
    phone_normalization: bool = Field(default=True, description="read phone numbers digit by digit")
    replace_remaining_symbols: bool = Field(default=True, description="read symbols left over: '&' -> 'and'")
    markdown_normalization: bool = Field(
        default=True,
        description="ggtts's own (Kokoro-FastAPI has no such flag): take Markdown and HTML markup away, keeping its "
        "text: '**bold**' -> 'bold', '# Title' -> 'Title.', '[docs](https://...)' -> 'docs', '<b>' -> ''",
    )

    def are_defaults(self) -> bool:
        """Whether every flag is at Kokoro-FastAPI's default, written out or left out: what its clients send when
        their user chose nothing."""
        return self.switches() == NormalizationOptions().switches()

    def switches(self) -> Normalization:
        return Normalization(
            enabled=self.normalize,
            markdown=self.markdown_normalization,
            emails=self.email_normalization,
            urls=self.url_normalization,
            phones=self.phone_normalization,
            plurals=self.optional_pluralization_normalization,
            units=self.unit_normalization,
            symbols=self.replace_remaining_symbols,
        )


class VoiceId(BaseModel):
    """OpenAI's custom voice reference, ``{"id": "..."}``: here the name of one of the model's voices."""

    model_config = ConfigDict(extra="forbid", strict=True)

    id: str


class SpeechRequest(BaseModel):
    """``POST /v1/audio/speech``: OpenAI's fields, and Kokoro-FastAPI's (``lang_code``, ``volume_multiplier``,
    ``normalization_options``, ``download_format``, ``return_download_link``) for its clients.

    Unknown fields and loose types (``"speed": "1.2"``) are refused, so a mistake is never silently ignored.
    """

    model_config = ConfigDict(extra="forbid", strict=True)

    model: str | None = Field(default=None, description="a model name from GET /v1/models; default: the first")
    input: str = Field(description="the text to speak")
    voice: str | VoiceId | None = Field(
        default=None, description="a voice from GET /v1/voices (or OpenAI's {\"id\": NAME}); default: the model's"
    )
    response_format: AudioFormat = DEFAULT_FORMAT
    speed: float = Field(default=1.0, ge=MIN_SPEED, le=MAX_SPEED)
    stream: bool | None = Field(
        default=None,
        description="send audio as it is synthesized; default: yes for every format that can be sent so (all but "
        "flac), as OpenAI does; false: one whole file",
    )
    stream_format: Literal["audio", "sse"] | None = Field(
        default=None,
        description="OpenAI's streaming forms: 'audio' (the audio's bytes as they are made) or 'sse' (server-sent "
        "events speech.audio.delta, each a base64 piece of the audio, then speech.audio.done)",
    )
    instructions: str | None = Field(
        default=None,
        description="OpenAI's instructions on how to speak; a 400 for a model that cannot follow them (all "
        "served today), unless empty",
    )

    lang_code: str | None = Field(
        default=None,
        description="the model's language option (Kokoro: a, b, j, z); default: the model's own choice",
    )
    volume_multiplier: float | None = Field(
        default=1.0,
        gt=0,
        le=MAX_VOLUME,
        allow_inf_nan=False,
        description="multiplies the samples (clipped to [-1, 1]); null: 1",
    )
    normalization_options: NormalizationOptions | None = Field(
        default=None,
        description=(
            "Kokoro-FastAPI's text normalization switches, for Kokoro models; default: the model's own normalization. "
            "Other models have no such switches: there Kokoro-FastAPI's defaults (what its clients send when their "
            "user chose nothing, flags written out or not) and all true ask nothing, and other values are a 400"
        ),
    )
    download_format: DownloadFormat | None = Field(
        default=None, description="Kokoro-FastAPI's format for a kept file; no effect, as no file is kept"
    )
    return_download_link: bool = Field(default=False, description="only false: ggtts keeps no files")

    @property
    def volume(self) -> float:
        return 1.0 if self.volume_multiplier is None else self.volume_multiplier

    @property
    def voice_name(self) -> str | None:
        return self.voice.id if isinstance(self.voice, VoiceId) else self.voice

    @property
    def streaming(self) -> bool:
        """Whether the audio is sent as it is made: asked for (``stream``, ``stream_format``), or by default for a
        format that can be streamed."""
        if self.stream_format is not None or self.stream is not None:
            return self.stream_format is not None or bool(self.stream)
        return self.response_format in STREAMABLE_FORMATS  # all but flac (see server.streaming)

    @property
    def sse(self) -> bool:
        return self.stream_format == "sse"


NDJSON = "application/x-ndjson"  # one JSON object per line


class CaptionedSpeechRequest(SpeechRequest):
    """``POST /v1/audio/captioned_speech`` (also at Kokoro-FastAPI's ``/dev/captioned_speech``): speech with word
    timestamps. Streams by default, as Kokoro-FastAPI does."""

    stream: bool | None = Field(default=True, description="one JSON line per chunk as it is synthesized")
    return_timestamps: bool = Field(default=True, description="give each word's start_time and end_time")


class OptionCard(BaseModel):
    """One per-call option a model takes in a speech request's ``options`` object."""

    name: str
    type: str
    default: Any
    description: str


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "ggtts"
    family: str  # the model family (kokoro, outetts)
    architecture: str  # the GGUF architecture of its file (kokoro, qwen2)
    sample_rate: int
    timestamps: bool = False  # its audio comes with word timestamps (/v1/audio/captioned_speech)
    options: list[OptionCard] = []  # what its speech requests' ``options`` object takes


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class ModelVoices(BaseModel):
    model: str
    voices: list[str]
    default_voice: str | None


class VoiceList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelVoices]


class AudioModel(BaseModel):
    id: str


class AudioModels(BaseModel):
    """``GET /v1/audio/models``, in the shape Open WebUI reads from an OpenAI-compatible speech server."""

    models: list[AudioModel]


class AudioVoice(BaseModel):
    id: str
    name: str


class AudioVoices(BaseModel):
    """``GET /v1/audio/voices``, in the shape Open WebUI reads: every voice once (the first model's, where two
    models have one of the same name), ``name`` saying what it is."""

    voices: list[AudioVoice]


class ModelHealth(BaseModel):
    busy: bool
    waiting: int


class Health(BaseModel):
    status: Literal["ok"] = "ok"
    models: dict[str, ModelHealth]


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorBody(BaseModel):
    error: ErrorDetail
