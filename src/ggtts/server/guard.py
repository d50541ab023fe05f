"""Checks made before a request reaches a route: the Host header, the API key, and the size of the body.

The Host check stops DNS rebinding: a web page on another site that resolves its own name to 127.0.0.1 could
otherwise drive a keyless server on this machine from the visitor's browser. Only the names the server is
meant to be reached by are accepted (the loopback names by default, ``--allowed-hosts`` for others).

The size check counts bytes as they arrive, so a body without ``Content-Length`` (chunked) is cut off at the
limit too, instead of being read whole into memory first.
"""

from __future__ import annotations

import hmac

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ggtts.server.errors import AUTHENTICATION, ApiError
from ggtts.server.settings import ServerSettings, host_name

# Reachable without the key: the health check, and the web page (static files holding no data; the page asks
# for the key and sends it with every API call).
PUBLIC_PATHS = frozenset({"/health", "/"})
PUBLIC_PREFIXES = ("/static/",)


def _too_large(settings: ServerSettings, size: int | None, limit: int) -> ApiError:
    said = f"is {size} bytes" if size is not None else "goes on"
    if limit != settings.max_body_bytes:
        what, param = f"this path takes at most {limit // 2**20} MiB (a question's audio, base64)", "messages"
    else:
        what, param = f"this server takes at most {settings.max_input_chars} characters of input", "input"
    return ApiError(
        413,
        f"the request body {said}, more than any valid request can be ({limit} bytes); {what}",
        code="input_too_long",
        param=param,
        headers={"Connection": "close"},  # the rest of the body is not read: the connection cannot go on
    )


async def _send_error(error: ApiError, scope: Scope, receive: Receive, send: Send) -> None:
    response = JSONResponse(error.body(), status_code=error.status, headers=error.headers)
    await response(scope, receive, send)


class GuardMiddleware:
    """Answers 400 for a Host this server is not meant to be reached by, 401 without the right
    ``Authorization: Bearer`` key, 413 for a body too large to be valid (as soon as it is)."""

    def __init__(self, app: ASGIApp, settings: ServerSettings, chat: bool = False) -> None:
        self.app = app
        self.settings = settings
        self.chat = chat  # a served model answers questions: the chat path takes audio

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            error = self.check(scope) or self.check_origin(scope)
            if error is None:
                await self.app(scope, receive, send)
            else:
                await _refuse_websocket(error, scope, send)
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        error = self.check(scope)
        if error is not None:
            await _send_error(error, scope, receive, send)
            return
        await self._call_counting(scope, receive, send)

    async def _call_counting(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, answering 413 the moment its body passes the limit; the route then sees a
        disconnect and whatever it tries to send is dropped."""
        limit = self.settings.body_limit(scope["path"], self.chat)
        state = {"received": 0, "refused": False, "started": False}

        async def counted_receive() -> Message:
            if state["refused"]:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                state["received"] += len(message.get("body", b""))
                if state["received"] > limit:
                    state["refused"] = True
                    if not state["started"]:
                        await _send_error(_too_large(self.settings, None, limit), scope, _disconnected, send)
                        state["started"] = True
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: Message) -> None:
            if state["refused"]:
                return
            if message["type"] == "http.response.start":
                state["started"] = True
            await send(message)

        await self.app(scope, counted_receive, guarded_send)

    def check(self, scope: Scope) -> ApiError | None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        path: str = scope["path"]
        allowed = self.settings.allowed_hosts
        if allowed is not None and host_name(headers.get("host", "")) not in allowed:
            return ApiError(
                400,
                f"this server does not answer to the host name '{host_name(headers.get('host', ''))}'; "
                "start it with --allowed-hosts to add names",
                code="invalid_host",
            )
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
        limit = self.settings.body_limit(path, self.chat)
        if length.isdigit() and int(length) > limit:
            return _too_large(self.settings, int(length), limit)
        return None

    def check_origin(self, scope: Scope) -> ApiError | None:
        """A WebSocket is not bound by the browser's same-origin rules: a page of another site could open one to
        this server with the visitor's browser. Its ``Origin`` (sent by browsers, not by other clients) must be
        the server's own (the Host it was reached by, port included), or a name it answers to on the default port,
        whatever ``--allowed-hosts`` says."""
        allowed = self.settings.allowed_hosts
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        origin = headers.get("origin")
        if origin is None:
            return None
        netloc = origin.partition("://")[2].lower()
        if netloc and netloc == headers.get("host", "").strip().lower():
            return None  # the server's own page
        if allowed is not None and netloc and host_name(netloc) in allowed and _default_port(origin, netloc):
            return None  # a page served under another name this server answers to
        return ApiError(
            403,
            f"a page from {origin!r} may not open this server's WebSocket; start it with --allowed-hosts to add "
            "that host",
            code="invalid_origin",
        )


def _default_port(origin: str, netloc: str) -> bool:
    """Whether the Origin names no port (or its scheme's own): another port on an allowed host is another site."""
    port = netloc.rpartition(":")[2] if netloc.count(":") == 1 else ""
    return not port or port == ("443" if origin.lower().startswith("https") else "80")


async def _refuse_websocket(error: ApiError, scope: Scope, send: Send) -> None:
    """Refuses a WebSocket before it opens: an HTTP answer with the error's status and body where the server can
    send one (ASGI's denial response), else a close (the client sees 403)."""
    if "websocket.http.response" in scope.get("extensions", {}):
        body = JSONResponse(error.body()).body
        headers = [
            (b"content-type", b"application/json"),
            *((k.encode(), v.encode()) for k, v in error.headers.items()),
        ]
        await send({"type": "websocket.http.response.start", "status": error.status, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})
    else:
        await send({"type": "websocket.close", "code": 1008})


async def _disconnected() -> Message:
    return {"type": "http.disconnect"}


def _authorized(header: str, key: str) -> bool:
    scheme, _, token = header.partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), key.encode())
