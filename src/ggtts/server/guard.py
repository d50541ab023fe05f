"""Checks made before a request reaches a route: the API key, and the size of the body."""

from __future__ import annotations

import hmac

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from ggtts.server.errors import AUTHENTICATION, ApiError
from ggtts.server.settings import ServerSettings

# Reachable without the key: the health check, and the web page (static files holding no data; the page asks
# for the key and sends it with every API call).
PUBLIC_PATHS = frozenset({"/health", "/"})
PUBLIC_PREFIXES = ("/static/",)


class GuardMiddleware:
    """Answers 401 without the right ``Authorization: Bearer`` key, 413 for a body too large to be valid."""

    def __init__(self, app: ASGIApp, settings: ServerSettings) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            error = self.check(scope)
            if error is not None:
                response = JSONResponse(error.body(), status_code=error.status, headers=error.headers)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def check(self, scope: Scope) -> ApiError | None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        path: str = scope["path"]
        key = self.settings.api_key
        public = path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES)
        if key is not None and not public and not _authorized(headers.get("authorization", ""), key):
            return ApiError(
                401,
                "a valid API key is required: send the header 'Authorization: Bearer <key>'",
                code="invalid_api_key",
                type=AUTHENTICATION,
                headers={"WWW-Authenticate": "Bearer"},
            )
        length = headers.get("content-length", "")
        if length.isdigit() and int(length) > self.settings.max_body_bytes:
            return ApiError(
                413,
                f"the request body is {int(length)} bytes, more than any valid request can be; "
                f"this server takes at most {self.settings.max_input_chars} characters of input",
                code="input_too_long",
                param="input",
            )
        return None


def _authorized(header: str, key: str) -> bool:
    scheme, _, token = header.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), key.encode())
