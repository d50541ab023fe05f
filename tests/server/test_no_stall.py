"""No request can stall the server: hostile text, chunked floods, cancelled work, bad hosts, bad Unicode.

The ``HEAVY`` word of the tone model runs torch layers for a minute inside a single chunk, so only cancelling
the chunk in progress (not stopping "before the next chunk") frees the model quickly.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from server_support import Server, start_server, stop_server
from starlette.testclient import TestClient
from test_faults import health, post, wait_until
from tone_model import ToneModel

from ggtts.server.app import create_app
from ggtts.server.errors import ApiError
from ggtts.server.settings import ServerSettings, allowed_host_names, host_name
from ggtts.server.worker import ModelWorker
from time_limit import scaled

SPEECH = "/v1/audio/speech"
# The HEAVY chunk runs a minute unless cancelled; the model must be free well before that (normally within 0.1 s:
# printed), and the chunk must not have run to its end (an event in the tone log, not a time).
FREE_WITHIN_S = scaled(20)
CPU_WINDOW_S = 1.0
KOKORO_TIMEOUT_S = 10.0


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def _cpu_used_over(pid: int, seconds: float) -> float:
    before = _cpu_seconds(pid)
    time.sleep(seconds)
    return _cpu_seconds(pid) - before


def _log_has(log: Path, line: str) -> bool:
    return log.exists() and line in log.read_text().splitlines()


def _raw_post(server: Server, payload: bytes) -> socket.socket:
    host, port = server.url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    head = (
        f"POST {SPEECH} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Authorization: Bearer {server.api_key}\r\nContent-Length: {len(payload)}\r\n\r\n"
    )
    sock.sendall(head.encode() + payload)
    return sock


# ---- cancelling the chunk in progress ---------------------------------------------------------------------------
def test_disconnect_cancels_the_chunk_in_progress(tone_server: Server, tone_log: Path) -> None:
    payload = json.dumps({"model": "slow", "input": "quit HEAVY after", "response_format": "wav"}).encode()
    sock = _raw_post(tone_server, payload)
    wait_until(lambda: _log_has(tone_log, "quit heavy-start"))
    time.sleep(0.3)  # well inside the minute-long chunk
    sock.close()
    idle_after = wait_until(lambda: not health(tone_server)["slow"]["busy"], timeout_s=FREE_WITHIN_S)
    cpu = _cpu_used_over(tone_server.process.pid, CPU_WINDOW_S)
    print(f"\nmodel free {idle_after:.2f} s after the disconnect; CPU used in the next second: {cpu:.2f} s")
    assert not _log_has(tone_log, "quit heavy-end"), "the chunk in progress ran to its end"
    assert cpu < 0.5 * CPU_WINDOW_S, f"the server still used {cpu:.2f} s of CPU in the second after"
    ok = post(tone_server, {"model": "slow", "input": "next", "response_format": "pcm"})
    assert ok.status_code == 200


def test_time_limit_cancels_the_chunk_in_progress(tone_server: Server, tone_log: Path) -> None:
    response = post(tone_server, {"model": "slow", "input": "late HEAVY", "response_format": "wav", "stream": False})
    assert response.status_code == 504
    wait_until(lambda: not health(tone_server)["slow"]["busy"], timeout_s=FREE_WITHIN_S)
    assert not _log_has(tone_log, "late heavy-end"), "the chunk in progress ran to its end"


def test_disconnect_cancels_a_stream_mid_chunk(tone_server: Server, tone_log: Path) -> None:
    body = {"model": "slow", "input": "flow HEAVY", "response_format": "pcm", "stream": True}
    with httpx.stream("POST", tone_server.url + SPEECH, json=body, headers=tone_server.headers) as response:
        assert response.status_code == 200
        chunks = response.iter_bytes()  # kept: a dropped iterator is closed at once, and the connection with it
        next(chunks)  # the first chunk came; the heavy one is next
        wait_until(lambda: _log_has(tone_log, "flow heavy-start"))
    wait_until(lambda: not health(tone_server)["slow"]["busy"], timeout_s=FREE_WITHIN_S)
    assert not _log_has(tone_log, "flow heavy-end"), "the chunk in progress ran to its end"


# ---- bodies, hosts, text ---------------------------------------------------------------------------------------
def test_chunked_flood_is_cut_at_the_limit(tone_server: Server) -> None:
    """A body without Content-Length is counted as it arrives: 413 at the limit, not after reading it all."""
    pid = tone_server.process.pid
    rss_before = _rss_bytes(pid)
    host, port = tone_server.url.removeprefix("http://").split(":")
    chunk = b"x" * (1 << 20)
    sent = 0
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(
            f"POST {SPEECH} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer {tone_server.api_key}\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
        )
        try:
            for _ in range(400):  # up to 400 MiB
                sock.sendall(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass
        sock.settimeout(10)
        try:
            answer = sock.recv(65536).decode("latin-1")
        except (ConnectionResetError, TimeoutError):
            answer = ""
    grown = _rss_bytes(pid) - rss_before
    print(f"\nsent {sent >> 20} MiB before the server stopped reading; RSS grew {grown >> 20} MiB")
    assert sent < 400 * len(chunk), "the server read the whole 400 MiB flood"
    assert answer == "" or answer.startswith("HTTP/1.1 413"), answer[:200]
    assert grown < 64 << 20
    assert httpx.get(tone_server.url + "/health", timeout=5).status_code == 200


def test_lone_surrogate_is_a_400(tone_server: Server) -> None:
    payload = b'{"model": "tone", "input": "hi \\ud800 there", "response_format": "pcm"}'
    response = httpx.post(
        tone_server.url + SPEECH,
        content=payload,
        headers={**tone_server.headers, "Content-Type": "application/json"},
        timeout=30,
    )
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "input" and "U+D800" in error["message"]


@pytest.fixture()
def guarded_client() -> Iterator[TestClient]:
    settings = ServerSettings(allowed_hosts=allowed_host_names("127.0.0.1", ["tts.example.org"]))
    with TestClient(create_app({"tone": ToneModel()}, settings), base_url="http://localhost") as client:
        yield client


@pytest.mark.parametrize("host", ["localhost", "localhost:8000", "127.0.0.1:8000", "[::1]:8000", "TTS.example.org"])
def test_allowed_host_names_are_served(guarded_client: TestClient, host: str) -> None:
    assert guarded_client.get("/health", headers={"Host": host}).status_code == 200


@pytest.mark.parametrize("host", ["evil.example.com", "evil.example.com:8000", "127.0.0.1.evil.com", ""])
def test_other_host_names_are_refused(guarded_client: TestClient, host: str) -> None:
    response = guarded_client.post(SPEECH, json={"input": "hi"}, headers={"Host": host})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_host"


def test_host_names_of_serve() -> None:
    from ggtts.server import host_names

    assert host_names("127.0.0.1", None) == {"localhost", "127.0.0.1", "::1"}
    assert host_names("0.0.0.0", None) is None  # reachable from the network under any name
    assert host_names("0.0.0.0", ["tts.lan,box"]) >= {"tts.lan", "box", "localhost"}
    assert host_names("127.0.0.1", ["*"]) is None
    assert host_name("[::1]:8000") == "::1" and host_name("Example.COM:80") == "example.com"


# ---- Retry-After from the queue --------------------------------------------------------------------------------
def test_retry_after_follows_the_running_request() -> None:
    worker = ModelWorker("m", ToneModel(), max_queue=0)
    worker.seconds_per_char = 0.05
    ticket = worker.admit(400)  # about 20 s of synthesis
    ticket.has_turn, ticket.started = True, time.monotonic() - 5.0
    worker._running = [ticket]
    with pytest.raises(ApiError) as refused:
        worker.admit(10)
    retry_after = int(refused.value.headers["Retry-After"])
    assert 14 <= retry_after <= 16  # 20 s expected, 5 s done
    assert "retry in about" in refused.value.message


# ---- hostile text against the real frontend --------------------------------------------------------------------
@pytest.fixture(scope="module")
def strict_kokoro_server(tmp_path_factory: pytest.TempPathFactory, kokoro_gguf: Path) -> Iterator[Server]:
    """``ggtts serve`` on the tiny Kokoro with a 10 s limit, as in the issue's report."""
    log_path = tmp_path_factory.mktemp("strict-kokoro") / "server.log"
    cmd = [str(Path(sys.executable).parent / "ggtts"), "serve", "-m", f"tiny={kokoro_gguf}"]
    server = start_server([*cmd, "--timeout", str(KOKORO_TIMEOUT_S)], log_path)
    yield server
    stop_server(server)


def _hello_seconds(server: Server) -> float:
    start = time.monotonic()
    response = post(server, {"input": "Hello.", "response_format": "wav"})
    assert response.status_code == 200, response.text
    return time.monotonic() - start


@pytest.mark.parametrize(
    "hostile",
    ["'" * 600, "'`" * 1000, "[" * 2000, "[a" * 2000, "e" + "\u0301" * 3000, "-." * 2000, "1" + ",000" * 102],
    ids=["apostrophes", "apostrophe-backtick", "brackets", "bracket-letter", "combining", "dash-dot", "grouped"],
)
def test_hostile_text_does_not_stall_the_next_request(strict_kokoro_server: Server, hostile: str) -> None:
    normal = _hello_seconds(strict_kokoro_server)
    body = {"input": hostile, "response_format": "wav", "stream": False}
    try:  # the client of the report gave up after 3 s
        response = httpx.post(strict_kokoro_server.url + SPEECH, json=body, timeout=3.0)
        assert response.status_code in (200, 400), response.text  # spoken, or "nothing to say"
    except httpx.TimeoutException:
        pass
    start = time.monotonic()
    after = _hello_seconds(strict_kokoro_server)
    print(f"\n{hostile[:12]!r}...: Hello. took {after:.2f} s after it ({normal:.2f} s before)")
    # a stall is the hostile text's whole work (minutes) ahead of it; the time limit cuts that at 10 s. The bound
    # leaves as much again for a busy machine (and scales with the suite's timeout factor).
    assert time.monotonic() - start < scaled(normal + 2 * KOKORO_TIMEOUT_S)


def test_text_with_nothing_to_say_is_a_400(strict_kokoro_server: Server) -> None:
    response = post(strict_kokoro_server, {"input": "... ?! —", "response_format": "wav"})
    assert response.status_code == 400
    assert "nothing to say" in response.json()["error"]["message"]
