"""Request and response bodies of the HTTP API, shaped like OpenAI's audio API."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from ggtts.api import MAX_SPEED, MIN_SPEED

AudioFormat = Literal["wav", "mp3", "opus", "flac", "pcm"]
DEFAULT_FORMAT: AudioFormat = "mp3"  # OpenAI's default

MEDIA_TYPES: dict[str, str] = {
    "wav": "audio/wav",
    "mp3": "audio/mpeg",
    "opus": "audio/ogg; codecs=opus",
    "flac": "audio/flac",
    "pcm": "audio/pcm",
}


class SpeechRequest(BaseModel):
    """``POST /v1/audio/speech``.

    Unknown fields and loose types (``"speed": "1.2"``) are refused, so a mistake is never silently ignored.
    """

    model_config = ConfigDict(extra="forbid", strict=True)

    model: str | None = Field(default=None, description="a model name from GET /v1/models; default: the first")
    input: str = Field(description="the text to speak")
    voice: str | None = Field(default=None, description="a voice from GET /v1/voices; default: the model's first")
    response_format: AudioFormat = DEFAULT_FORMAT
    speed: float = Field(default=1.0, ge=MIN_SPEED, le=MAX_SPEED)
    stream: bool = Field(default=False, description="send audio as it is synthesized (as Kokoro-FastAPI does)")
    stream_format: Literal["audio"] | None = Field(
        default=None,
        description="OpenAI's way to ask for streaming; only 'audio' (raw audio bytes) is offered",
    )

    @property
    def streaming(self) -> bool:
        return self.stream or self.stream_format == "audio"


NDJSON = "application/x-ndjson"  # one JSON object per line


class CaptionedSpeechRequest(SpeechRequest):
    """``POST /v1/audio/captioned_speech`` (also at Kokoro-FastAPI's ``/dev/captioned_speech``): speech with word
    timestamps. Streams by default, as Kokoro-FastAPI does."""

    stream: bool = Field(default=True, description="one JSON line per chunk as it is synthesized")
    return_timestamps: bool = Field(default=True, description="give each word's start_time and end_time")
    lang_code: str | None = Field(default=None, description="the model's language code (Kokoro: a, b, j, z)")


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "ggtts"
    family: str  # the model family (kokoro, outetts)
    architecture: str  # the GGUF architecture of its file (kokoro, qwen2)
    sample_rate: int


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
