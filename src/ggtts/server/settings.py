"""Limits and access settings of the speech server."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ggtts.errors import InputError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
DEFAULT_WYOMING_URI = "tcp://127.0.0.1:10200"  # 10200: the port Home Assistant's Wyoming TTS servers use
DEFAULT_MAX_QUEUE = 16  # requests waiting per model, beyond the one being synthesized
DEFAULT_MAX_INPUT_CHARS = 4096
DEFAULT_TIMEOUT_S = 120.0  # synthesis (and waiting for a turn) per request
DEFAULT_SEND_TIMEOUT_S = 60.0  # a client that takes none of the bytes sent to it for this long is cut off
DEFAULT_REQUEST_TIMEOUT_S = 30.0  # from connecting (or the last response) to a whole request
DEFAULT_MAX_CONNECTIONS = 512
# at the connection cap, a connection that has waited this long for its (next) request is closed to make room for
# a new one: longer than a request takes to follow its connection on any usable network
DEFAULT_IDLE_GRACE_S = 0.25
API_KEY_ENV = "GGTTS_API_KEY"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})


@dataclass(frozen=True)
class ServerSettings:
    """What the server accepts: access key, queue depth, input size and time per request, and the host names
    it answers to (``None``: any; ``ggtts serve`` sets the loopback names unless told otherwise), and whether
    streamed requests start fast (``fast_start``: the option, to models whose family has it; a whole file would
    only pay for it; and text streamed in is spoken from its first clause however short, for every model).

    ``timeout_s`` bounds each request's synthesis and its wait for a turn, not the time its client takes to
    read; ``send_timeout_s``, ``request_timeout_s`` and ``max_connections`` bound the connections themselves, and
    at the cap a connection idle for ``idle_grace_s`` makes room for a new one (see
    :mod:`ggtts.server.connections`)."""

    api_key: str | None = None
    max_queue: int = DEFAULT_MAX_QUEUE
    max_input_chars: int = DEFAULT_MAX_INPUT_CHARS
    timeout_s: float = DEFAULT_TIMEOUT_S
    allowed_hosts: frozenset[str] | None = None
    fast_start: bool = False
    send_timeout_s: float = DEFAULT_SEND_TIMEOUT_S
    request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    idle_grace_s: float = DEFAULT_IDLE_GRACE_S
    model_threads: int | None = None  # torch threads of each model's own thread (None: as the process has them)
    replicas: int = 1  # copies of each model loaded, each with its own thread: requests at once per model

    def __post_init__(self) -> None:
        if self.max_queue < 0:
            raise InputError(f"max_queue must be 0 or more, got {self.max_queue}")
        if self.replicas < 1:
            raise InputError(f"replicas must be at least 1, got {self.replicas}")
        if self.max_input_chars < 1:
            raise InputError(f"max_input_chars must be at least 1, got {self.max_input_chars}")
        for name in ("timeout_s", "send_timeout_s", "request_timeout_s"):
            if not getattr(self, name) > 0:  # NaN too
                raise InputError(f"{name} must be positive, got {getattr(self, name)}")
        if not self.idle_grace_s >= 0:
            raise InputError(f"idle_grace_s must be 0 or more, got {self.idle_grace_s}")
        if self.max_connections < 1:
            raise InputError(f"max_connections must be at least 1, got {self.max_connections}")
        if self.api_key == "":
            object.__setattr__(self, "api_key", None)

    def body_limit(self, path: str, chat: bool) -> int:
        """The largest body a request to ``path`` may send: a question's audio (base64) on the chat path where a
        served model answers questions (``chat``), else what the largest input text takes."""
        return MAX_CHAT_BODY_BYTES if chat and path == CHAT_BODY_PATH else self.max_body_bytes

    @property
    def max_body_bytes(self) -> int:
        """A body larger than this cannot hold a valid request, so it is refused before it is read.

        (A character takes up to 4 bytes in UTF-8, up to 6 as a JSON escape.)
        """
        return 6 * self.max_input_chars + BODY_OVERHEAD_BYTES


BODY_OVERHEAD_BYTES = 16 * 1024  # room for the JSON fields other than `input`
CHAT_BODY_PATH = "/v1/chat/completions"
# a question's audio, base64: 48 MiB holds 18 minutes of 16 kHz 16-bit mono WAV (far more as MP3 or FLAC)
MAX_CHAT_BODY_BYTES = 48 * 1024 * 1024


def host_name(host_header: str) -> str:
    """The name in a Host header, lower case, without the port: "[::1]:8000" -> "::1"."""
    host = host_header.strip().lower()
    if host.startswith("["):  # an IPv6 literal
        return host[1 : host.find("]")] if "]" in host else host
    if host.count(":") > 1:  # a bare IPv6 address
        return host
    name, _, port = host.rpartition(":")
    return name if name and port.isdigit() else host


def allowed_host_names(bound_to: str, extra: Iterable[str] = ()) -> frozenset[str]:
    """The names a server bound to ``bound_to`` answers to: loopback names, the bound address, ``extra``."""
    names = {*LOOPBACK_HOSTS, host_name(bound_to)}
    names.update(host_name(h) for h in extra if h.strip())
    return frozenset(names)
