"""Server processes on loopback for the API, fault and browser tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

HERE = Path(__file__).parent
REPO = HERE.parent.parent
ARTIFACTS = REPO / "test-artifacts"
STARTUP_TIMEOUT_S = 120.0
API_KEY = "test-key-123"
TONE_TIMEOUT_S = 3.0
TONE_MAX_INPUT_CHARS = 2000


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


@pytest.fixture(scope="session")
def tone_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tone") / "chunks.log"


@pytest.fixture(scope="session")
def tone_server(tmp_path_factory: pytest.TempPathFactory, tone_log: Path) -> Iterator[Server]:
    """The real server on tone models, with an API key, a queue of 1 and a short time limit."""
    log_path = tmp_path_factory.mktemp("tone-server") / "server.log"
    cmd = [sys.executable, str(HERE / "tone_server.py"), "--api-key", API_KEY, "--max-queue", "1"]
    cmd += ["--max-input-chars", str(TONE_MAX_INPUT_CHARS), "--timeout", str(TONE_TIMEOUT_S)]
    server = start_server(cmd, log_path, env={"TONE_LOG": str(tone_log)})
    server.api_key = API_KEY
    yield server
    stop_server(server)


def chromium_path() -> str | None:
    path = "/usr/bin/chromium"
    return path if os.access(path, os.X_OK) else None


KOKORO_NAME = "tiny"


def _write_tiny_kokoro(path: Path) -> None:
    sys.path.insert(0, str(REPO / "tests" / "parity"))
    try:
        from _kokoro_upstream import build_upstream, random_voices, tiny_config
    finally:
        sys.path.pop(0)
    from ggtts.convert.kokoro_gguf import write_kokoro_gguf

    config = tiny_config()
    state = build_upstream(config).folded_state()
    write_kokoro_gguf(path, config, state, random_voices(config), "f32", name=KOKORO_NAME)


def _text_frontend_works(path: Path) -> bool:
    from ggtts.api import load
    from ggtts.errors import InputError

    try:
        load(path).synthesize("Hi.")
    except InputError as exc:
        if "frontend" in str(exc):
            return False
        raise
    return True


@pytest.fixture(scope="session")
def kokoro_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Kokoro GGUF written by the real converter from hexgrad's modules."""
    pytest.importorskip("kokoro")
    pytest.importorskip("transformers")
    path = tmp_path_factory.mktemp("kokoro") / "tiny.gguf"
    _write_tiny_kokoro(path)
    return path


@pytest.fixture(scope="session")
def kokoro_server(tmp_path_factory: pytest.TempPathFactory, kokoro_gguf: Path) -> Iterator[Server]:
    """``ggtts serve -m tiny=<file>``; while Kokoro has no text frontend, the same server with the
    frontend swapped for letters-as-phonemes (kokoro_letters_server.py)."""
    log_path = tmp_path_factory.mktemp("kokoro-server") / "server.log"
    spec = f"{KOKORO_NAME}={kokoro_gguf}"
    if _text_frontend_works(kokoro_gguf):
        cmd = [str(Path(sys.executable).parent / "ggtts"), "serve", "-m", spec]
    else:
        cmd = [sys.executable, str(HERE / "kokoro_letters_server.py"), spec]
    server = start_server(cmd, log_path)
    yield server
    stop_server(server)
