"""Starting and stopping server processes on loopback: shared by the server tests and their fixtures."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

HERE = Path(__file__).parent
REPO = HERE.parent.parent
ARTIFACTS = REPO / "test-artifacts"
STARTUP_TIMEOUT_S = 120.0
API_KEY = "test-key-123"
TONE_TIMEOUT_S = 3.0
TONE_MAX_INPUT_CHARS = 2000
# Kokoro-FastAPI's normalization_options defaults (its NormalizationOptions), as its clients send them unasked
KOKORO_FASTAPI_NORMALIZATION = {
    "normalize": True,
    "unit_normalization": False,
    "url_normalization": True,
    "email_normalization": True,
    "optional_pluralization_normalization": True,
    "phone_normalization": True,
    "replace_remaining_symbols": True,
}


Post = Callable[[dict[str, object]], httpx.Response]  # a request body -> the response of a server's speech route


def check_normalization_options_reach_the_markup(post: Post, voice: str) -> None:
    """On a model whose text (here) loses only its markup: by default, and with Kokoro-FastAPI's defaults that its
    clients send unasked, "**Hello** ... <b>today</b>" is said as "Hello ... today" (the same bytes);
    ``markdown_normalization: false`` or ``normalize: false`` keep the markup, which then says something else."""
    body = {"input": "Hello there, how are you today?", "voice": voice, "response_format": "pcm"}
    marked = {**body, "input": "**Hello** there, how are you <b>today</b>?"}
    plain, default = post(body), post(marked)
    client = post({**marked, "stream": True, "normalization_options": KOKORO_FASTAPI_NORMALIZATION})
    assert plain.status_code == default.status_code == client.status_code == 200, client.text
    assert default.content == client.content == plain.content
    kept = post({**marked, "normalization_options": {"markdown_normalization": False}})
    as_written = post({**marked, "normalization_options": {"normalize": False}})
    assert kept.status_code == as_written.status_code == 200, kept.text
    assert kept.content == as_written.content != plain.content


@dataclass
class Server:
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path
    api_key: str | None = None

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(cmd: list[str], log_path: Path, env: dict[str, str] | None = None) -> Server:
    port = free_port()
    log_file = log_path.open("wb")
    process = subprocess.Popen(
        [*cmd, "--port", str(port)],
        stdout=log_file,
        stderr=subprocess.STDOUT,
        env={**os.environ, **(env or {})},
        cwd=REPO,
    )
    server = Server(f"http://127.0.0.1:{port}", process, log_path)
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with {process.returncode}:\n{server.log()}")
        try:
            if httpx.get(f"{server.url}/health", timeout=1.0).status_code == 200:
                return server
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    stop_server(server)
    raise RuntimeError(f"the server did not answer within {STARTUP_TIMEOUT_S} s:\n{server.log()}")


def stop_server(server: Server) -> None:
    server.process.terminate()
    try:
        server.process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait()


def chromium_path() -> str | None:
    path = "/usr/bin/chromium"
    return path if os.access(path, os.X_OK) else None


def open_sockets(pid: int | str = "self") -> int:
    """How many sockets process ``pid`` has open (Linux: counted in /proc)."""
    count = 0
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):  # closed meanwhile
            count += os.readlink(fd).startswith("socket:")
    return count


SETTLE_S = 1.0  # less than a refusal's linger (connections.REFUSED_LINGER_S, 2 s)


def settled_sockets(count: Callable[[], int], bound: int) -> int:
    """``count()`` once it is at most ``bound``, or its last value after :data:`SETTLE_S`: a socket the server has
    just closed leaves its fd table on the next turn of its loop, after the client may have read its answer."""
    end = time.monotonic() + SETTLE_S
    while (value := count()) > bound and time.monotonic() < end:
        time.sleep(0.02)
    return value
