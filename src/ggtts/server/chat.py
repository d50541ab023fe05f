"""OpenAI's chat completions with audio, ``POST /v1/chat/completions``, for the served models that answer
questions (the ``chat`` capability: Qwen3-Omni). The request and response shapes are OpenAI's audio chat:

- in: ``messages`` (``system``/``developer`` turns, then one ``user`` turn whose ``content`` is a text or a list of
  ``{"type": "text", "text"}`` and ``{"type": "input_audio", "input_audio": {"data": base64, "format"}}`` parts:
  at most one audio, placed before the text), ``modalities`` (``["text"]`` or ``["text", "audio"]``), ``audio``
  (``{"voice", "format"}``: wav, mp3, flac, opus, aac or pcm16), ``stream``, ``max_completion_tokens`` (or
  ``max_tokens``), ``seed``;
- out: ``choices[0].message`` with ``content`` (text only) or ``audio: {id, data, expires_at, transcript}``
  (``content`` null, as OpenAI answers); streamed, ``chat.completion.chunk`` events whose ``delta`` carries the
  role, then the text (``content``, or ``audio.transcript``), then ``audio.data`` pieces (the format's bytes, base64,
  that join into one file), then ``finish_reason``, then ``data: [DONE]``.

Earlier assistant turns (a conversation's history) are refused with a 400: the model hears one question at a time.
This module holds the shapes and their checks; the route (:mod:`ggtts.server.app`) runs the model.
"""

from __future__ import annotations

import base64
import binascii
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ggtts.server.errors import ApiError
from ggtts.server.schemas import VoiceId
from ggtts.server.settings import CHAT_BODY_PATH

CHAT_PATH = CHAT_BODY_PATH
AUDIO_FORMATS = {"wav": "wav", "mp3": "mp3", "flac": "flac", "opus": "opus", "aac": "aac", "pcm16": "pcm"}
AUDIO_KEPT_S = 3600  # OpenAI's audio.expires_at: ggtts keeps nothing, so it only says when a client may drop it


class InputAudio(BaseModel):
    model_config = ConfigDict(extra="forbid")

    data: str = Field(description="the sound file's bytes, base64")
    format: str = Field(default="wav", description="its format (wav, mp3, flac, ogg: read by libsndfile)")


class TextPart(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["text"]
    text: str


class AudioPart(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["input_audio"]
    input_audio: InputAudio


Part = Annotated[TextPart | AudioPart, Field(discriminator="type")]


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[Part] | None = None
    name: str | None = None


class AudioOutput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    voice: str | VoiceId | None = Field(default=None, description="a voice of the model; default: the model's")
    format: Literal["wav", "mp3", "flac", "opus", "aac", "pcm16"] = "wav"


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    include_usage: bool = False


Modality = Literal["text", "audio"]


class ChatRequest(BaseModel):
    """``POST /v1/chat/completions``: OpenAI's fields for an audio chat (others are refused, not ignored)."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = Field(default=None, description="a model name from GET /v1/models; default: the first")
    messages: list[Message] = Field(min_length=1)
    modalities: list[Modality] = Field(default_factory=lambda: list[Modality](["text"]))
    audio: AudioOutput | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_completion_tokens: int | None = Field(default=None, ge=1)
    max_tokens: int | None = Field(default=None, ge=1, description="the older name of max_completion_tokens")
    seed: int | None = Field(default=None, ge=0)
    n: int = Field(default=1, ge=1, le=1, description="one answer per request")
    user: str | None = None
    options: dict[str, Any] | None = Field(
        default=None,
        description="the model's own per-call options, as /v1/audio/speech takes them (the talker's sampling, "
        "max_frames...); with OpenAI's client: extra_body={'options': {...}}",
    )

    @property
    def speaks(self) -> bool:
        return "audio" in self.modalities


@dataclass(frozen=True)
class Question:
    """What the model is asked: the user's text and audio (a sound file's bytes), and the system prompt."""

    text: str
    audio: bytes | None
    system: str | None


def _text_of(message: Message, where: str) -> str:
    if isinstance(message.content, str) or message.content is None:
        return message.content or ""
    texts = []
    for j, part in enumerate(message.content):
        if not isinstance(part, TextPart):
            raise ApiError(
                400,
                f"{where}: only a user turn may hold audio",
                code="unsupported_value",
                param=f"{where}.content[{j}]",
            )
        texts.append(part.text)
    return "\n".join(texts)


def question(body: ChatRequest) -> Question:
    """The question ``body`` asks: 400 for a conversation the model cannot take (history, two audios, no user
    turn last, audio that is not base64)."""
    system: list[str] = []
    user: Message | None = None
    for i, message in enumerate(body.messages):
        where = f"messages[{i}]"
        if message.role in ("system", "developer"):
            if user is not None:
                raise ApiError(
                    400,
                    f"{where}: a {message.role} turn after the user's is not supported",
                    code="unsupported_value",
                    param=where,
                )
            system.append(_text_of(message, where))
        elif message.role == "assistant":
            raise ApiError(
                400,
                f"{where}: earlier assistant turns are not supported: this model answers one question at a time "
                "(send the system turn and the user's question)",
                code="unsupported_value",
                param=where,
            )
        elif user is not None:
            raise ApiError(400, f"{where}: one user turn per request", code="unsupported_value", param=where)
        else:
            user = message
            user_at = i
    if user is None:
        raise ApiError(400, "messages: there is no user turn to answer", code="invalid_value", param="messages")
    text: list[str] = []
    audio: bytes | None = None
    parts = [TextPart(type="text", text=user.content or "")] if not isinstance(user.content, list) else user.content
    for j, part in enumerate(parts):
        where = f"messages[{user_at}].content[{j}]"
        if isinstance(part, TextPart):
            text.append(part.text)
            continue
        if audio is not None:
            raise ApiError(400, f"{where}: one audio part per question", code="unsupported_value", param=where)
        try:
            audio = base64.b64decode(part.input_audio.data, validate=True)
        except (binascii.Error, ValueError):
            raise ApiError(
                400, f"{where}.input_audio.data is not base64", code="invalid_value", param=f"{where}.input_audio.data"
            ) from None
        if not audio:
            raise ApiError(
                400, f"{where}.input_audio.data is empty", code="invalid_value", param=f"{where}.input_audio.data"
            )
    joined = "\n".join(t for t in text if t.strip())
    if audio is None and not joined.strip():
        raise ApiError(
            400,
            f"messages[{user_at}]: the user's turn is empty",
            code="invalid_value",
            param=f"messages[{user_at}].content",
        )
    return Question(joined, audio, "\n".join(system) if any(s.strip() for s in system) else None)


def output_format(body: ChatRequest) -> str | None:
    """ggtts's name of the audio format to answer in (None: text only); 400 where ``audio`` and ``modalities``
    disagree."""
    if not body.speaks:
        if body.audio is not None:
            raise ApiError(400, 'audio is given but modalities lacks "audio"', code="invalid_value", param="audio")
        return None
    if body.audio is None:
        raise ApiError(
            400, 'modalities asks for "audio": give audio: {"voice", "format"}', code="invalid_value", param="audio"
        )
    fmt = AUDIO_FORMATS[body.audio.format]
    if body.stream and fmt == "flac":
        raise ApiError(
            400,
            "flac cannot be streamed; stream pcm16, wav, mp3, opus or aac",
            code="unsupported_value",
            param="audio.format",
        )
    return fmt


@dataclass
class Completion:
    """One answer's identity and counts, shared by its whole response or its chunks."""

    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finished: bool = True  # ended by the model (stop), not by the token limit (length)
    id: str = ""
    audio_id: str = ""
    created: int = 0

    def __post_init__(self) -> None:
        self.id = self.id or f"chatcmpl-{uuid.uuid4().hex}"
        self.audio_id = self.audio_id or f"audio_{uuid.uuid4().hex}"
        self.created = self.created or int(time.time())

    @property
    def finish_reason(self) -> str:
        return "stop" if self.finished else "length"

    def usage(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
        }

    def whole(self, text: str, audio: bytes | None) -> dict[str, Any]:
        """``chat.completion``: the text as ``content``, or (audio asked) as the audio's ``transcript``."""
        message: dict[str, Any] = {"role": "assistant", "content": text if audio is None else None, "refusal": None}
        if audio is not None:
            message["audio"] = {
                "id": self.audio_id,
                "data": base64.b64encode(audio).decode("ascii"),
                "expires_at": self.created + AUDIO_KEPT_S,
                "transcript": text,
            }
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": self.finish_reason}],
            "usage": self.usage(),
        }

    def chunk(self, delta: dict[str, Any], finish: bool = False, usage: bool = False) -> dict[str, Any]:
        """One ``chat.completion.chunk``."""
        out: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [
                {"index": 0, "delta": delta, "logprobs": None, "finish_reason": self.finish_reason if finish else None}
            ],
        }
        if usage:
            out["choices"] = []
            out["usage"] = self.usage()
        return out

    def deltas(self, text: str, audio: Iterator[bytes] | None, include_usage: bool) -> Iterator[dict[str, Any]]:
        """The streamed answer's chunks: the role, the text, the audio's pieces, the finish (and the usage)."""
        yield self.chunk({"role": "assistant", "content": "" if audio is None else None})
        if audio is None:
            yield self.chunk({"content": text})
        else:
            yield self.chunk({"audio": {"id": self.audio_id, "transcript": text}})
            for data in audio:
                if data:
                    yield self.chunk({"audio": {"id": self.audio_id, "data": base64.b64encode(data).decode("ascii")}})
            yield self.chunk({"audio": {"id": self.audio_id, "expires_at": self.created + AUDIO_KEPT_S}})
        yield self.chunk({}, finish=True)
        if include_usage:
            yield self.chunk({}, usage=True)
