"""HTTP errors with OpenAI-style bodies: ``{"error": {"message", "type", "param", "code"}}``."""

from __future__ import annotations

from collections.abc import Mapping

from ggtts.server.schemas import ErrorBody, ErrorDetail

INVALID_REQUEST = "invalid_request_error"
AUTHENTICATION = "authentication_error"
SERVER_ERROR = "server_error"


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
