"""HTTP errors with OpenAI-style bodies: ``{"error": {"message", "type", "param", "code"}}``."""

from __future__ import annotations

from collections.abc import Mapping

from ggtts.server.schemas import ErrorBody, ErrorDetail

INVALID_REQUEST = "invalid_request_error"
AUTHENTICATION = "authentication_error"
SERVER_ERROR = "server_error"
# A message echoes what the request sent (a model or voice name): one longer than this keeps its two ends
MAX_MESSAGE_CHARS = 1000


class ApiError(Exception):
    """An error answer: status, one sentence for people, and OpenAI's ``type``/``param``/``code``."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str,
        param: str | None = None,
        type: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        message = _printable(message)
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.param = param
        self.type = type or (SERVER_ERROR if status >= 500 else INVALID_REQUEST)
        self.headers = dict(headers or {})

    def body(self) -> dict[str, object]:
        detail = ErrorDetail(message=self.message, type=self.type, param=self.param, code=self.code)
        return ErrorBody(error=detail).model_dump()


def _printable(message: str) -> str:
    """``message`` as valid Unicode text (a lone surrogate a request sent, as the escape ``\\udXXX``) of at most
    :data:`MAX_MESSAGE_CHARS` characters: a longer one keeps its start and its end (the advice), not what it
    echoed whole."""
    message = message.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(message) <= MAX_MESSAGE_CHARS:
        return message
    keep = (MAX_MESSAGE_CHARS - 40) // 2
    return f"{message[:keep]} ... ({len(message) - 2 * keep} characters left out) ... {message[-keep:]}"
