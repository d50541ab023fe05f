"""Server processes on loopback for the API, fault and browser tests."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from server_support import (
    API_KEY,
    HERE,
    TONE_MAX_INPUT_CHARS,
    TONE_TIMEOUT_S,
    Server,
    start_server,
    stop_server,
)


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


KOKORO_NAME = "tiny"


@pytest.fixture(scope="session")
def kokoro_gguf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Kokoro GGUF written by the real converter from hexgrad's modules."""
    pytest.importorskip("kokoro")
    pytest.importorskip("transformers")
    from ggtts.measure.kokoro.upstream import write_tiny_gguf

    return write_tiny_gguf(tmp_path_factory.mktemp("kokoro") / "tiny.gguf", name=KOKORO_NAME)


@pytest.fixture(scope="session")
def kokoro_server(tmp_path_factory: pytest.TempPathFactory, kokoro_gguf: Path) -> Iterator[Server]:
    """``ggtts serve -m tiny=<file>``: the real command, the real text frontend, a tiny random Kokoro."""
    log_path = tmp_path_factory.mktemp("kokoro-server") / "server.log"
    cmd = [str(Path(sys.executable).parent / "ggtts"), "serve", "-m", f"{KOKORO_NAME}={kokoro_gguf}"]
    server = start_server(cmd, log_path)
    yield server
    stop_server(server)
