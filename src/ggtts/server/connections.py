"""Limits on the connections themselves, which uvicorn leaves open: the server's HTTP and WebSocket protocols are
uvicorn's own, with three bounds added.

- **Request timeout** (``request_timeout_s``): from the moment a connection opens, or its last response ends,
  until a whole request (head and body) has arrived. A client that connects and sends nothing, or trickles a
  header line now and then (slowloris), is closed when it runs out; uvicorn's keep-alive timeout only closes a
  connection that sends nothing at all after a response.
- **Send timeout** (``send_timeout_s``): a client that takes none of the bytes sent to it for this long (its
  connection's write buffer stays full) is cut off, so a reader that stopped reading does not hold its model's
  turn. A client playing the audio as it arrives takes bytes all the time and never comes near it.
- **Connection cap** (``max_connections``): at the cap, a new connection takes the place of the one that has
  waited longest for its request, if that one has waited ``idle_grace_s`` (it is closed: idle, silent and
  trickling clients cannot keep working ones out); if every connection is at work, the new one is answered 503
  at once and closed, so clients use up neither the process's file descriptors nor the server's attention;
  ``/health`` and the clients already connected go on being served. A refused client has
  :data:`REFUSED_LINGER_S` to read its answer and close; at most as many refusals as the cap linger at once
  (past that, a flood's connections are closed as soon as answered), so the process needs about twice the cap
  in open files, which :func:`prepare_for_connections` asks of the system.

The request limit on synthesis itself (``timeout_s``) is :class:`ggtts.server.worker.Deadline`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import resource
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

from ggtts.server.errors import ApiError
from ggtts.server.settings import ServerSettings

log = logging.getLogger("ggtts.server")

# Descriptors the process needs besides its connections (model files, libraries, the listening socket, logs).
SPARE_FILES = 256
BUSY_RETRY_AFTER_S = 1
REFUSAL_NOTE_S = 5.0
REFUSED_LINGER_S = 2.0  # a refused client has this long to read its 503 and close
_WAITING_FOR_REQUEST = (h11.IDLE, h11.SEND_BODY)  # the client's side of a connection that owes a request


def busy_response(max_connections: int) -> bytes:
    """The whole HTTP answer to a connection over the cap: 503, an OpenAI-style error body, then close."""
    error = ApiError(
        503,
        f"this server has its limit of {max_connections} connections open; retry in a moment",
        code="too_many_connections",
    )
    body = json.dumps(error.body()).encode()
    head = (
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
        f"retry-after: {BUSY_RETRY_AFTER_S}\r\nconnection: close\r\ncontent-length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


class _Tally:
    """Counts events and says so in the log at most every :data:`REFUSAL_NOTE_S` seconds (a flood of connections
    is not also a flood of log lines): ``message`` % (count, *args)."""

    def __init__(self, message: str) -> None:
        self.message = message
        self.count = 0
        self.noted = -math.inf

    def note(self, *args: object) -> None:
        self.count += 1
        now = time.monotonic()
        if now - self.noted >= REFUSAL_NOTE_S:
            log.warning(self.message, self.count, *args)
            self.count, self.noted = 0, now


_REFUSALS = _Tally("refused %d connections: %d are open (the limit), none of them idle")
_EVICTIONS = _Tally("closed %d idle connections to make room for new ones (the limit: %d)")


def note_refused(limit: int) -> None:
    """Count a connection refused at the cap of ``limit`` (noted in the log at most every few seconds)."""
    _REFUSALS.note(limit)


class IdleConnections:
    """A server's connections that wait for a request (or a Wyoming event), oldest wait first: at the cap, the
    oldest makes room for a new connection (:meth:`make_room`)."""

    def __init__(self, grace_s: float) -> None:
        self.grace_s = grace_s
        self._since: OrderedDict[Any, float] = OrderedDict()

    def waiting(self, connection: Any, now: float) -> None:
        """``connection`` waits from ``now`` (if it did not already)."""
        self._since.setdefault(connection, now)

    def busy(self, connection: Any) -> None:
        """``connection`` no longer waits (its request came, or it closed)."""
        self._since.pop(connection, None)

    def make_room(self, now: float, limit: int, close: Callable[[Any], None]) -> bool:
        """Close (``close(connection)``) the connection that has waited longest, if it has waited the grace;
        whether one was."""
        for connection, since in self._since.items():
            if now - since < self.grace_s:
                return False
            del self._since[connection]
            _EVICTIONS.note(limit)
            close(connection)
            return True
        return False


class Refusing:
    """How many refused connections a server still has open (their clients reading the refusal)."""

    count = 0


class _SendTimeout:
    """Cuts a connection whose write buffer stays over its high-water mark (the client takes nothing) for
    ``send_timeout_s``: the transport says when the buffer fills (``pause_writing``) and when it drains."""

    send_timeout_s: float
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    _stall: asyncio.TimerHandle | None = None

    def pause_writing(self) -> None:
        super().pause_writing()  # type: ignore[misc]
        if self._stall is None:
            self._stall = self.loop.call_later(self.send_timeout_s, self._stalled)

    def resume_writing(self) -> None:
        self._end_stall()
        super().resume_writing()  # type: ignore[misc]

    def connection_lost(self, exc: Exception | None) -> None:
        self._end_stall()
        super().connection_lost(exc)  # type: ignore[misc]

    def _end_stall(self) -> None:
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None

    def _stalled(self) -> None:
        self._stall = None
        log.warning("cutting a connection whose client took nothing for %g s (the send timeout)", self.send_timeout_s)
        self.transport.abort()  # close() would wait for the buffer to drain, which is what is not happening


class GuardedH11Protocol(_SendTimeout, H11Protocol):
    """uvicorn's HTTP/1.1 protocol with the request timeout, the send timeout and the connection cap (each server
    has its own subclass, with its own idle and refusing connections: :func:`guarded_protocols`)."""

    request_timeout_s: float
    max_connections: int
    idle: IdleConnections
    refusing: Refusing
    _request_timer: asyncio.TimerHandle | None = None
    _refused = False
    _lingering = False

    def eof_received(self) -> None:
        if self._refused:  # the refused client has read its answer and closed: so do we
            self.transport.close()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        at_work = len(self.connections) - self.refusing.count
        if at_work > self.max_connections and not self.idle.make_room(
            self.loop.time(), self.max_connections, _close_idle
        ):
            note_refused(self.max_connections)
            # the answer, then end of our side; what the client sends meanwhile is read and dropped until it closes
            # (closing with its request unread would reset the connection and lose the answer)
            self._refused = True
            transport.write(busy_response(self.max_connections))
            if self.refusing.count >= self.max_connections:  # the cap's worth of refusals linger already
                transport.close()
                return
            self._lingering = True
            self.refusing.count += 1
            transport.write_eof()
            self.loop.call_later(REFUSED_LINGER_S, transport.abort)
            return
        self._watch_request()

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        super().data_received(data)
        if self.transport.get_protocol() is self:  # not after an upgrade to a WebSocket
            self._watch_request()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._watch_request()

    def handle_websocket_upgrade(self, event: h11.Request) -> None:
        self._stop_request_timer()  # the WebSocket's protocol takes the connection over
        super().handle_websocket_upgrade(event)

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_request_timer()
        if self._lingering:
            self.refusing.count -= 1
            self._lingering = False
        super().connection_lost(exc)

    def _watch_request(self) -> None:
        """The timer runs while the client owes a request (its head or the rest of its body)."""
        waiting = self.conn.their_state in _WAITING_FOR_REQUEST and not self.transport.is_closing()
        if not waiting:
            self._stop_request_timer()
        elif self._request_timer is None:
            self._request_timer = self.loop.call_later(self.request_timeout_s, self._request_late)
            self.idle.waiting(self, self.loop.time())

    def _stop_request_timer(self) -> None:
        self.idle.busy(self)
        if self._request_timer is not None:
            self._request_timer.cancel()
            self._request_timer = None

    def _request_late(self) -> None:
        self._request_timer = None
        if self.conn.their_state in _WAITING_FOR_REQUEST and not self.transport.is_closing():
            log.info("closing a connection that sent no whole request in %g s", self.request_timeout_s)
            self.transport.close()


IDLE_MARK = "ggtts.idle"  # the ASGI scope's key of a WebSocket's IdleMark


class IdleMark:
    """What a WebSocket's application says of it (``scope[IDLE_MARK]``): whether it waits for its client with
    nothing to do (then, at the cap, it may make room for a new connection, as an HTTP connection waiting for its
    request does), or is at work (speaking, or reading what the client sent)."""

    def __init__(self, connection: GuardedWebSocketProtocol) -> None:
        self._connection = connection

    def waiting(self) -> None:
        """Idle from now, unless its client has not taken what was sent (the transport's buffer is full: reading
        a long reply at the pace of playback is work)."""
        c = self._connection
        c.idle.busy(c)  # (to the end of the line: it waits from now)
        if not c.transport.is_closing() and c.writable.is_set():
            c.idle.waiting(c, c.loop.time())

    def busy(self) -> None:
        self._connection.idle.busy(self._connection)


class GuardedWebSocketProtocol(_SendTimeout, WebSocketsSansIOProtocol):
    """uvicorn's WebSocket protocol with the send timeout (messages in are bounded by ``ws_max_size``) and its
    place among the idle connections: idle from its handshake until its application says otherwise
    (:class:`IdleMark`), so that quiet sockets cannot keep working clients out at the cap."""

    idle: IdleConnections

    def handle_connect(self, event: Any) -> None:
        super().handle_connect(event)
        scope = getattr(self, "scope", None)
        if scope is not None:
            mark = IdleMark(self)
            scope[IDLE_MARK] = mark  # type: ignore[literal-required]
            mark.waiting()

    def connection_lost(self, exc: Exception | None) -> None:
        self.idle.busy(self)
        super().connection_lost(exc)


EVICTED_CLOSE = 1013  # "try again later": the close code of an idle WebSocket that made room at the cap


def _close_idle(connection: GuardedH11Protocol | GuardedWebSocketProtocol) -> None:
    if isinstance(connection, GuardedH11Protocol):
        connection._stop_request_timer()
    else:  # a WebSocket hears why (its session is gone: a client may open another)
        with contextlib.suppress(Exception):
            connection.conn.send_close(EVICTED_CLOSE, "idle at the server's connection limit: it made room")
            connection.transport.write(b"".join(connection.conn.data_to_send()))
    connection.transport.close()


def guarded_protocols(settings: ServerSettings) -> dict[str, Any]:
    """uvicorn's ``http`` and ``ws`` arguments: the protocol classes above, bound to ``settings``' limits."""
    limits = {
        "request_timeout_s": settings.request_timeout_s,
        "send_timeout_s": settings.send_timeout_s,
        "max_connections": settings.max_connections,
        "idle": IdleConnections(settings.idle_grace_s),
        "refusing": Refusing(),
    }
    http = type("GGTTSHttpProtocol", (GuardedH11Protocol,), limits)
    ws_limits = {"send_timeout_s": settings.send_timeout_s, "idle": limits["idle"]}  # one line of idle connections
    ws = type("GGTTSWebSocketProtocol", (GuardedWebSocketProtocol,), ws_limits)
    return {"http": http, "ws": ws}


def prepare_for_connections(max_connections: int) -> None:
    """Let the process hold ``max_connections`` connections, as many refusals lingering, and its own files: the
    soft limit on open files is raised toward the hard one (it is often 1,024, which a thousand idle clients would
    use up). Where the system's limit is still met, asyncio's traceback for each connection it cannot accept
    becomes one line every few seconds (:class:`_AcceptFailures`)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 2 * max_connections + SPARE_FILES
    if soft != resource.RLIM_INFINITY and soft < wanted:
        new = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
        except (ValueError, OSError) as exc:
            log.warning("could not raise the open-file limit from %d to %d: %s", soft, new, exc)
        if new < wanted:
            log.warning(
                "the open-file limit (%d) is below twice --max-connections %d plus %d; lower it or raise `ulimit -n`",
                new,
                max_connections,
                SPARE_FILES,
            )
    asyncio_log = logging.getLogger("asyncio")
    if not any(isinstance(f, _AcceptFailures) for f in asyncio_log.filters):
        asyncio_log.addFilter(_AcceptFailures())


class _AcceptFailures(logging.Filter):
    """asyncio logs a traceback each time its listening socket cannot accept a connection for want of file
    descriptors (then pauses accepting for a second): this counts them and says so in one line at most every
    :data:`REFUSAL_NOTE_S` seconds instead."""

    MESSAGE = "socket.accept() out of system resource"

    def __init__(self) -> None:
        super().__init__()
        self.tally = _Tally(
            "out of open files %d times: connections wait in the listen queue (raise `ulimit -n` or lower "
            "--max-connections)"
        )

    def filter(self, record: logging.LogRecord) -> bool:
        if not str(record.msg).startswith(self.MESSAGE):
            return True
        self.tally.note()
        return False
