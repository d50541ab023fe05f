"""Limits and access settings of the speech server."""

from __future__ import annotations

from dataclasses import dataclass

from ggtts.errors import InputError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000
DEFAULT_MAX_QUEUE = 16  # requests waiting per model, beyond the one being synthesized
DEFAULT_MAX_INPUT_CHARS = 4096
DEFAULT_TIMEOUT_S = 120.0
API_KEY_ENV = "GGTTS_API_KEY"


@dataclass(frozen=True)
class ServerSettings:
    """What the server accepts: access key, queue depth, input size and time per request."""

    api_key: str | None = None
    max_queue: int = DEFAULT_MAX_QUEUE
    max_input_chars: int = DEFAULT_MAX_INPUT_CHARS
    timeout_s: float = DEFAULT_TIMEOUT_S

    def __post_init__(self) -> None:
        if self.max_queue < 0:
            raise InputError(f"max_queue must be 0 or more, got {self.max_queue}")
        if self.max_input_chars < 1:
            raise InputError(f"max_input_chars must be at least 1, got {self.max_input_chars}")
        if self.timeout_s <= 0:
            raise InputError(f"timeout_s must be positive, got {self.timeout_s}")
        if self.api_key == "":
            object.__setattr__(self, "api_key", None)

    @property
    def max_body_bytes(self) -> int:
        """A body larger than this cannot hold a valid request, so it is refused before it is read.

        (A character takes up to 4 bytes in UTF-8, up to 6 as a JSON escape.)
        """
        return 6 * self.max_input_chars + BODY_OVERHEAD_BYTES


BODY_OVERHEAD_BYTES = 16 * 1024  # room for the JSON fields other than `input`
