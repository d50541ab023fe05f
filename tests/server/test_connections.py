"""The connections themselves are bounded (:mod:`ggtts.server.connections`), and a request's time limit bounds the
server's work, not its client's reading (issue #36): a stream read at the pace of playback arrives whole; a client
that stops reading is cut off and its model's turn passes on; a client that never finishes its request (nothing
sent, or a header line now and then) is closed; connections past the cap get one 503.

The server here is the real one on tone models, with short limits. Its ``long`` model makes 384 KB of pcm per
word, so a stream is far larger than what the sockets' buffers hold (a few MB on loopback): the server has to
wait for its client. Nothing is timed: the waits are for events (the model free, the socket closed) under
hang-catching limits, and how long the client has kept the server waiting is counted in its own sleeps.
"""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import h11
import httpx
import pytest
from server_support import API_KEY, HERE, Server, open_sockets, settled_sockets, start_server, stop_server
from test_faults import health, wait_until
from test_no_stall import _raw_post

from time_limit import scaled

SPEECH = "/v1/audio/speech"
SYNTHESIS_TIMEOUT_S = 3.0  # the stream's 75 chunks take well under half a second of the server's work
SEND_TIMEOUT_S = 2.0
REQUEST_TIMEOUT_S = 3.0
MAX_CONNECTIONS = 6
LONG_WORDS = 75  # 75 x 384 KB = 28.8 MB of pcm
LONG_CHUNK_BYTES = 8 * 24000 * 2  # tone_server.LONG_CHUNK_S at 24 kHz, 16-bit
READ_BYTES = 64 * 1024
READ_PAUSE_S = 0.011  # 440 reads: about 4.8 s of listening
HANG_S = scaled(60)
NEVER_S = 1e6
IDLE_GRACE_S = 0.2


@pytest.fixture(scope="module")
def tone_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("limits") / "chunks.log"


@pytest.fixture(scope="module")
def limited_server(tmp_path_factory: pytest.TempPathFactory, tone_log: Path) -> Iterator[Server]:
    log_path = tmp_path_factory.mktemp("limited-server") / "server.log"
    cmd = [sys.executable, str(HERE / "tone_server.py"), "--api-key", API_KEY, "--long-model"]
    cmd += ["--timeout", str(SYNTHESIS_TIMEOUT_S), "--send-timeout", str(SEND_TIMEOUT_S)]
    cmd += ["--request-timeout", str(REQUEST_TIMEOUT_S), "--max-connections", str(MAX_CONNECTIONS)]
    cmd += ["--idle-grace", str(NEVER_S)]  # no idle connection makes room: the cap's refusals are tested here
    server = start_server(cmd, log_path, env={"TONE_LOG": str(tone_log)})
    server.api_key = API_KEY
    yield server
    stop_server(server)
    assert "Traceback" not in server.log(), server.log()[-3000:]


def _address(server: Server) -> tuple[str, int]:
    host, port = server.url.removeprefix("http://").split(":")
    return host, int(port)


def _send_speech(server: Server, text: str, *, tag: str) -> socket.socket:
    """A streamed pcm request for ``long``, sent on a socket of its own (the test reads it as it likes)."""
    return _raw_post(server, json.dumps({"model": "long", "input": f"{tag} {text}", "response_format": "pcm"}).encode())


def _chunks_made(log: Path, tag: str) -> int:
    return sum(1 for line in log.read_text().splitlines() if line.split()[0] == tag) if log.exists() else 0


def _closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closed ``sock`` (end of stream or a reset), reading what was left; fails on a hang."""
    sock.settimeout(HANG_S)
    try:
        while sock.recv(1 << 20):
            pass
    except ConnectionResetError:
        pass
    except TimeoutError:
        return False
    return True


def test_a_stream_read_at_listening_pace_arrives_whole(limited_server: Server, tone_log: Path) -> None:
    """The client takes longer to read than the server may spend on the request: all of it still arrives."""
    words = LONG_WORDS
    sock = _send_speech(limited_server, " ".join(["a"] * (words - 1)), tag="pace")
    client = h11.Connection(h11.CLIENT)
    client.send(h11.Request(method="POST", target=SPEECH, headers=[("Host", "x"), ("Content-Length", "0")]))
    client.send(h11.EndOfMessage())
    status, body, ended = 0, bytearray(), False
    reads = 0
    reads_when_done: int | None = None  # how many paced reads the client had made when the last chunk was made
    sock.settimeout(HANG_S)
    while not ended:
        data = sock.recv(READ_BYTES)
        client.receive_data(data)
        reads += 1
        if reads_when_done is None and _chunks_made(tone_log, "pace") == words:
            reads_when_done = reads
        if not data:
            break
        while (event := client.next_event()) not in (h11.NEED_DATA, h11.PAUSED):
            if isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                ended = True
        time.sleep(READ_PAUSE_S)  # a client that plays the audio takes it as it is played
    sock.close()
    assert status == 200
    assert ended, "the stream was cut before its end"
    assert len(body) == words * LONG_CHUNK_BYTES
    # the test means something only if the server waited for the client longer than its time limit
    assert reads_when_done is not None and reads_when_done * READ_PAUSE_S > SYNTHESIS_TIMEOUT_S, reads_when_done


def test_a_client_that_stops_reading_is_cut_off(limited_server: Server, tone_log: Path) -> None:
    sock = _send_speech(limited_server, " ".join(["a"] * (LONG_WORDS - 1)), tag="stop")
    try:
        wait_until(lambda: _chunks_made(tone_log, "stop") > 0, timeout_s=HANG_S)
        # the buffers fill, the client reads nothing: the send timeout ends the request and frees the model
        wait_until(lambda: not health(limited_server)["long"]["busy"], timeout_s=HANG_S)
        assert _chunks_made(tone_log, "stop") < LONG_WORDS, "the whole stream fit in the buffers: nothing tested"
        assert _closed_by_server(sock), "the connection was left open"
    finally:
        sock.close()
    assert "took nothing for 2 s" in limited_server.log()
    ok = httpx.post(
        limited_server.url + SPEECH,
        json={"model": "tone", "input": "next", "response_format": "pcm"},
        headers=limited_server.headers,
        timeout=HANG_S,
    )
    assert ok.status_code == 200


@pytest.mark.parametrize("trickle", [False, True], ids=["silent", "slowloris"])
def test_a_client_that_never_finishes_its_request_is_closed(limited_server: Server, trickle: bool) -> None:
    with socket.create_connection(_address(limited_server)) as sock:
        sock.settimeout(0.5)
        if trickle:
            sock.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        closed = False
        for line in range(int(HANG_S / 0.5)):  # a header line every half second, for up to a minute
            try:
                closed = sock.recv(4096) == b""
            except TimeoutError:
                pass
            except ConnectionResetError:
                closed = True
            if closed:
                break
            if trickle:
                sock.sendall(f"X-Line-{line}: {'x' * 20}\r\n".encode())
        assert closed, "the server kept a connection that sent no whole request"
    assert health(limited_server)["tone"]["busy"] is False  # and it goes on answering


def test_connections_past_the_cap_get_one_503(limited_server: Server) -> None:
    held = [socket.create_connection(_address(limited_server)) for _ in range(MAX_CONNECTIONS)]
    try:
        with socket.create_connection(_address(limited_server)) as extra:
            extra.settimeout(HANG_S)
            answer = b""
            while chunk := extra.recv(4096):
                answer += chunk
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 503"), answer[:200]
        assert json.loads(body)["error"]["code"] == "too_many_connections"
    finally:
        for sock in held:
            sock.close()
    # the held ones gone, the server answers again
    wait_until(lambda: httpx.get(limited_server.url + "/health", timeout=5).status_code == 200, timeout_s=HANG_S)


def test_a_refused_client_that_sent_its_request_reads_the_503(limited_server: Server) -> None:
    """Past the cap, a client that has already sent a whole request still gets the answer (a close with its request
    unread would reset the connection and lose it)."""
    held = [socket.create_connection(_address(limited_server)) for _ in range(MAX_CONNECTIONS)]
    try:
        body = json.dumps({"model": "tone", "input": "x " * 500, "response_format": "pcm"}).encode()
        with _raw_post(limited_server, body) as late:
            late.settimeout(HANG_S)
            answer = b""
            while chunk := late.recv(4096):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 503"), answer[:200]
    finally:
        for sock in held:
            sock.close()


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts the server's sockets in /proc (Linux)")
def test_refusals_that_linger_are_bounded_by_the_cap(limited_server: Server) -> None:
    """A refused client has a moment to read its 503 and close; a flood of refused clients that never close must
    not each hold a socket of the server for that moment, or a thousand of them run it out of open files: at most
    the cap's worth of refusals linger, the rest are closed as soon as answered."""
    before = open_sockets(limited_server.process.pid)
    held = [socket.create_connection(_address(limited_server)) for _ in range(MAX_CONNECTIONS)]
    refused = []
    try:
        for _ in range(8 * MAX_CONNECTIONS):
            sock = socket.create_connection(_address(limited_server))
            sock.settimeout(HANG_S)
            assert sock.recv(12) == b"HTTP/1.1 503"  # answered: the server has taken it
            refused.append(sock)
        bound = 2 * MAX_CONNECTIONS
        during = settled_sockets(lambda: open_sockets(limited_server.process.pid) - before, bound)
    finally:
        for sock in held + refused:
            sock.close()
    assert during <= bound, f"{during} sockets open for {MAX_CONNECTIONS} held connections"
    wait_until(lambda: httpx.get(limited_server.url + "/health", timeout=5).status_code == 200, timeout_s=HANG_S)


def test_the_open_file_limit_is_raised_and_accept_failures_are_one_line() -> None:
    """In a process of its own (the limit is the process's): the soft limit goes up to twice the cap plus the spare
    files, within the hard limit; asyncio's traceback for each connection it cannot accept becomes a counted line."""
    script = """
import logging, resource, sys
from ggtts.server.connections import SPARE_FILES, prepare_for_connections
logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s", stream=sys.stdout)
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (300, hard))
prepare_for_connections(100)
print("soft", resource.getrlimit(resource.RLIMIT_NOFILE)[0], "wanted", min(2 * 100 + SPARE_FILES, hard))
prepare_for_connections(100)  # once more: one filter, not two
for _ in range(3):
    try:
        raise OSError(24, "Too many open files")
    except OSError:
        logging.getLogger("asyncio").error("socket.accept() out of system resource\\nsocket: <fd=6>", exc_info=True)
logging.getLogger("asyncio").error("something else")
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=HANG_S, check=True)
    lines = out.stdout.splitlines()
    _, soft, _, wanted = lines[0].split()
    assert soft == wanted, lines
    assert [line for line in lines if "out of open files" in line] == [
        "WARNING ggtts.server: out of open files 1 times: connections wait in the listen queue (raise `ulimit -n` "
        "or lower --max-connections)"
    ]
    assert "Traceback" not in out.stdout + out.stderr
    assert "ERROR asyncio: something else" in lines


@pytest.fixture(scope="module")
def evicting_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """At its cap, a connection idle for IDLE_GRACE_S makes room for a new one (the request timeout is long)."""
    log_path = tmp_path_factory.mktemp("evicting-server") / "server.log"
    cmd = [sys.executable, str(HERE / "tone_server.py"), "--api-key", API_KEY, "--long-model"]
    cmd += ["--max-connections", str(MAX_CONNECTIONS), "--idle-grace", str(IDLE_GRACE_S)]
    server = start_server(cmd, log_path)
    server.api_key = API_KEY
    yield server
    stop_server(server)
    assert "Traceback" not in server.log(), server.log()[-3000:]


def _health_on(sock: socket.socket) -> bytes:
    """GET /health on ``sock`` (kept open): the status line."""
    sock.settimeout(HANG_S)
    sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    answer = b""
    while b"\r\n\r\n" not in answer and (data := sock.recv(4096)):
        answer += data
    return answer.split(b"\r\n", 1)[0]


def _still_open(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1) != b""
    except BlockingIOError:  # nothing to read, and not closed
        return True
    except ConnectionResetError:
        return False


def test_idle_connections_make_room_for_a_request(evicting_server: Server) -> None:
    """The cap's worth of connections that say nothing (or half a request) does not keep clients out: each newcomer
    takes the place of the connection that has waited longest, and is served; a connection at work (a stream
    being read) is never the one closed."""
    address = _address(evicting_server)
    working = _send_speech(evicting_server, "a b c d e f", tag="work")  # 2.3 MB of pcm, read below
    working.settimeout(HANG_S)
    head = working.recv(12)
    assert head == b"HTTP/1.1 200"
    held = [socket.create_connection(address) for _ in range(MAX_CONNECTIONS - 2)]
    held.append(socket.create_connection(address))
    held[-1].sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: x\r\n")  # half a request
    newcomers = []
    try:
        time.sleep(2 * IDLE_GRACE_S)  # all of them idle past the grace (a busy machine only makes it longer)
        for _ in range(3):  # each stays open, idle after its answer (the youngest wait)
            newcomers.append(socket.create_connection(address))
            assert _health_on(newcomers[-1]) == b"HTTP/1.1 200 OK"
        assert all(_closed_by_server(sock) for sock in held[:3])  # the three oldest made room
        assert all(_still_open(sock) for sock in held[3:]), "a younger idle connection was closed"
        received = len(head)
        while data := working.recv(1 << 16):  # the stream at work arrives whole
            received += len(data)
        assert received > 6 * LONG_CHUNK_BYTES
    finally:
        for sock in [*held, *newcomers, working]:
            sock.close()


def _live(server: Server) -> Any:
    from websockets.sync.client import connect

    url = server.url.replace("http://", "ws://") + "/v1/audio/speech/live"
    return connect(url, additional_headers=server.headers, open_timeout=HANG_S)


def test_quiet_live_sockets_make_room_for_a_request(evicting_server: Server) -> None:
    """The cap's worth of live WebSockets that say nothing, before or after their start, does not keep HTTP clients
    out: the socket quiet longest makes room, and hears why (1013, try again later); before, /health and every
    request got 503 until they closed. A socket whose reply paused mid-sentence is at work: it stays."""
    pytest.importorskip("websockets")
    from websockets.exceptions import ConnectionClosed

    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(_live(evicting_server)) for _ in range(MAX_CONNECTIONS)]
        for n, ws in enumerate(sockets):  # each quiet since its start, the first the longest
            ws.send(json.dumps({"type": "start"}))
            assert json.loads(ws.recv(timeout=HANG_S))["type"] == "ready"
            if n == 0:  # the oldest: mid-sentence (a reply paused for a tool call, say)
                ws.send(json.dumps({"type": "text", "text": "Let me check the"}))
        time.sleep(2 * IDLE_GRACE_S)  # all of them quiet past the grace
        newcomer = socket.create_connection(_address(evicting_server))
        try:
            assert _health_on(newcomer) == b"HTTP/1.1 200 OK"
        finally:
            newcomer.close()
        with pytest.raises(ConnectionClosed) as closed:  # the oldest quiet one (started, nothing pending) made room
            sockets[1].recv(timeout=HANG_S)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1013
        sockets[0].send(json.dumps({"type": "text", "text": " weather."}))
        sockets[0].send(json.dumps({"type": "end"}))
        while not isinstance(frame := sockets[0].recv(timeout=HANG_S), str) or json.loads(frame)["type"] != "done":
            pass  # its audio, then done: the session went on


def test_a_live_socket_that_says_nothing_is_closed(limited_server: Server) -> None:
    """As an HTTP connection that sends no request: one error naming the wait, then the close."""
    pytest.importorskip("websockets")
    with _live(limited_server) as ws:
        error = json.loads(ws.recv(timeout=HANG_S))
    assert (
        error["type"] == "error"
        and error["error"]["message"] == f"no message within {REQUEST_TIMEOUT_S:g} s of connecting"
    )
