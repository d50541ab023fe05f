"""The real server under load and faults: a full queue, time limits, clients that leave, failures."""

from __future__ import annotations

import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest
from audio_check import decode
from server_support import TONE_TIMEOUT_S, Server
from tone_model import ToneModel

from time_limit import scaled

SPEECH = "/v1/audio/speech"
SLOW_CHUNK_S = 0.3  # tone_server.SLOW_CHUNK_DELAY_S
IDLE_WAIT_S = scaled(60)  # a hang-catcher: the waits below are for events, normally well under a second


def post(server: Server, body: object) -> httpx.Response:
    return httpx.post(server.url + SPEECH, json=body, headers=server.headers, timeout=60)


def post_until_admitted(server: Server, body: object, attempts: int = 40) -> httpx.Response:
    """``post``, again while the queue is full (it holds one waiting request)."""
    for _ in range(attempts):
        response = post(server, body)
        if response.status_code != 503:
            return response
        time.sleep(0.05)
    pytest.fail(f"still 503 after {attempts} attempts")


def health(server: Server) -> dict[str, dict[str, object]]:
    return httpx.get(server.url + "/health", timeout=5).json()["models"]


def wait_until(condition, timeout_s: float = IDLE_WAIT_S) -> float:
    """Seconds until ``condition()`` held; fails after ``timeout_s``."""
    start = time.monotonic()
    while not condition():
        if time.monotonic() - start > timeout_s:
            pytest.fail(f"condition not met within {timeout_s} s")
        time.sleep(0.05)
    return time.monotonic() - start


def chunks_made(log: Path, tag: str) -> int:
    if not log.exists():
        return 0
    return sum(1 for line in log.read_text().splitlines() if line.split()[0] == tag)


def words(tag: str, n: int) -> str:
    return " ".join([tag] + ["w"] * (n - 1))


def test_full_queue_answers_503_with_retry_after(tone_server: Server) -> None:
    # max_queue is 1: one request runs, one waits, the third is turned away
    body = {"model": "slow", "input": words("queue", 3), "response_format": "pcm"}
    with ThreadPoolExecutor(2) as pool:
        running = pool.submit(post, tone_server, body)
        wait_until(lambda: health(tone_server)["slow"]["busy"])
        waiting = pool.submit(post, tone_server, body)
        wait_until(lambda: health(tone_server)["slow"]["waiting"] == 1)
        refused = post(tone_server, body)
        assert refused.status_code == 503
        assert int(refused.headers["retry-after"]) >= 1
        error = refused.json()["error"]
        assert error["code"] == "queue_full" and "busy" in error["message"]
        other_model = post(tone_server, {"model": "tone", "input": "not queued", "response_format": "pcm"})
        assert other_model.status_code == 200  # each model has its own queue
        assert running.result().status_code == 200
        assert waiting.result().status_code == 200


def test_time_limit_answers_504(tone_server: Server, tone_log: Path) -> None:
    n = int(TONE_TIMEOUT_S / SLOW_CHUNK_S) + 5
    start = time.monotonic()
    body = {"model": "slow", "input": words("limit", n), "response_format": "wav", "stream": False}
    response = post(tone_server, body)
    elapsed = time.monotonic() - start
    assert response.status_code == 504
    assert f"{TONE_TIMEOUT_S:g} s" in response.json()["error"]["message"]
    assert elapsed >= TONE_TIMEOUT_S  # not answered before the limit (a lower bound: no machine is too fast)
    wait_until(lambda: not health(tone_server)["slow"]["busy"])
    assert chunks_made(tone_log, "limit") < n, "the request was spoken to its end"


def test_time_limit_cuts_a_stream(tone_server: Server) -> None:
    n = int(TONE_TIMEOUT_S / SLOW_CHUNK_S) + 5
    body = {"model": "slow", "input": words("cut", n), "response_format": "pcm", "stream": True}
    received = 0
    with (
        pytest.raises(httpx.RemoteProtocolError),
        httpx.stream("POST", tone_server.url + SPEECH, json=body, headers=tone_server.headers, timeout=60) as response,
    ):
        assert response.status_code == 200
        for chunk in response.iter_bytes():
            received += len(chunk)
    assert 0 < received < len(ToneModel().expected(body["input"])) * 2
    wait_until(lambda: not health(tone_server)["slow"]["busy"])


def _stopped(log: Path, tag: str, n: int) -> None:
    """Once the model is free, synthesis of the request has stopped for good, far short of its ``n`` chunks (the
    client left after the first; the chunks made meanwhile depend on how busy the machine is, not their count)."""
    made = chunks_made(log, tag)
    time.sleep(2 * SLOW_CHUNK_S)
    assert chunks_made(log, tag) == made, "synthesis went on after the model was free"
    assert made <= n // 2, f"{made} of {n} chunks made: synthesis went on after the client left"


def test_disconnect_stops_a_stream(tone_server: Server, tone_log: Path) -> None:
    n = 20  # 6 s of synthesis if nobody stopped it
    body = {"model": "slow", "input": words("gone", n), "response_format": "pcm", "stream": True}
    with httpx.stream("POST", tone_server.url + SPEECH, json=body, headers=tone_server.headers) as response:
        next(response.iter_bytes())
    wait_until(lambda: not health(tone_server)["slow"]["busy"])
    _stopped(tone_log, "gone", n)


def test_disconnect_stops_a_whole_request(tone_server: Server, tone_log: Path) -> None:
    n = 20
    payload = f'{{"model": "slow", "input": "{words("left", n)}", "response_format": "wav"}}'.encode()
    host, port = tone_server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as sock:
        head = (
            f"POST {SPEECH} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
            f"Authorization: Bearer {tone_server.api_key}\r\nContent-Length: {len(payload)}\r\n\r\n"
        )
        sock.sendall(head.encode() + payload)
        wait_until(lambda: chunks_made(tone_log, "left") >= 1)
    wait_until(lambda: not health(tone_server)["slow"]["busy"])
    _stopped(tone_log, "left", n)


def test_failing_requests_do_not_harm_others(tone_server: Server) -> None:
    model = ToneModel()
    good = {
        "model": "tone",
        "input": "alpha beta gamma delta",
        "voice": "high",
        "response_format": "pcm",
        "stream": False,
    }
    bad_whole = {"model": "tone", "input": "one two FAIL", "response_format": "wav", "stream": False}
    bad_stream = {"model": "tone", "input": "one two FAIL", "response_format": "pcm", "stream": True}

    def run(body: dict[str, object]) -> tuple[str, int, bytes]:
        try:
            response = post_until_admitted(tone_server, body)
        except httpx.RemoteProtocolError:
            return "cut", 0, b""
        return "ok", response.status_code, response.content

    bodies = [good, bad_whole, good, bad_stream, good, bad_whole, {**good, "stream": True}, bad_stream]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(run, bodies))
    expected = model.expected(good["input"], "high")
    for body, (how, status, content) in zip(bodies, results, strict=True):
        if body["input"] == good["input"]:
            assert (how, status) == ("ok", 200)
            samples, _ = decode(content, "pcm", model.sample_rate)
            np.testing.assert_allclose(samples, expected, atol=2 / 32768)
        elif body.get("stream"):
            assert how == "cut"  # it had started: the connection is cut, not closed as if complete
        else:
            assert status == 500
    assert health(tone_server)["tone"] == {"busy": False, "waiting": 0}


def test_many_concurrent_clients_all_get_their_audio(tone_server: Server) -> None:
    model = ToneModel()
    texts = [f"client{i} " + " ".join(["w"] * (i % 4)) for i in range(12)]
    barrier = threading.Barrier(6)

    def run(text: str) -> np.ndarray:
        if texts.index(text) < len(texts) // 2:
            barrier.wait(timeout=10)
        response = post_until_admitted(tone_server, {"model": "tone", "input": text, "response_format": "pcm"})
        assert response.status_code == 200, response.text
        return decode(response.content, "pcm", model.sample_rate)[0]

    with ThreadPoolExecutor(6) as pool:
        outputs = list(pool.map(run, texts))
    for text, samples in zip(texts, outputs, strict=True):
        np.testing.assert_allclose(samples, model.expected(text), atol=2 / 32768)


def test_a_captioned_stream_that_fails_ends_with_an_error_line(tone_server: Server) -> None:
    """NDJSON: the lines of the chunks made, then one line with the error's body, then the connection is cut."""
    body = {"model": "tone", "input": "one two FAIL", "response_format": "pcm", "return_timestamps": False}
    lines: list[bytes] = []
    with (
        pytest.raises(httpx.RemoteProtocolError),
        httpx.stream(
            "POST", tone_server.url + "/v1/audio/captioned_speech", json=body, headers=tone_server.headers, timeout=60
        ) as response,
    ):
        assert response.status_code == 200
        for line in response.iter_lines():
            lines.append(line.encode())
    parsed = [json.loads(line) for line in lines if line]
    assert len(parsed) >= 2 and all("audio" in p for p in parsed[:-1])
    assert parsed[-1]["error"]["message"] and "audio" not in parsed[-1]
    assert health(tone_server)["tone"] == {"busy": False, "waiting": 0}
