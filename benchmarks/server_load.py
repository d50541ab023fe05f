"""Load on the speech server: N concurrent clients send a fixed number of streamed requests, over rounds.

Prints per round: throughput (requests/s, seconds of audio per second), latency and time-to-first-byte
percentiles, errors by status, and the server's resident memory before and after (a leak shows as RSS
growing round after round).

    python benchmarks/server_load.py -m kokoro --clients 4 --requests 16 --rounds 3
    python benchmarks/server_load.py --url http://127.0.0.1:8000 --pid 1234 --model-name kokoro

With ``-m`` it starts ``python -m ggtts.server`` on a free loopback port and stops it at the end.

``--abusive N`` adds N hostile connections that run through every round, each reconnecting when the server closes
it: a third connect and say nothing, a third trickle a header line a second (slowloris), a third send garbage;
``--stalled K`` more ask for a long stream and read none of it (each holds the model until the send timeout cuts
it). The well-formed clients retry a 503 as its Retry-After says; the table then also counts those retries and
the hostile connections the server ended, by the bound that ended them (from the server's log).

    python benchmarks/server_load.py -m piper-joe --clients 2 --requests 8 --rounds 3 --abusive 300 --stalled 2 \
        --server-args "--send-timeout 5 --request-timeout 5 --max-connections 200"
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shlex
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx

DEFAULT_TEXT = "The quick brown fox jumps over the lazy dog. It was a bright cold day in April."
PCM_BYTES_PER_SAMPLE = 2
STARTUP_TIMEOUT_S = 600.0
STALLED_HOLD_S = 20.0  # how long a stalled reader keeps its connection before it opens another
ABUSE_KINDS = ("idle", "slowloris", "garbage")
# what the server's log says when it ends a hostile connection (ggtts.server.connections)
SERVER_CUTS = {
    "send timeout": re.compile(r"took nothing for"),
    "request timeout": re.compile(r"sent no whole (?:request|event)"),
    "cap": re.compile(r"refused (\d+) connections"),  # a count per note: the server notes refusals every few s
    "making room": re.compile(r"closed (\d+) idle connections"),  # idle ones closed at the cap for newcomers
}


@dataclass
class Round:
    retries: int = 0  # 503s (a full queue, the connection cap) retried after their Retry-After
    latencies: list[float] = field(default_factory=list)
    ttfbs: list[float] = field(default_factory=list)
    audio_s: float = 0.0
    errors: Counter[str] = field(default_factory=Counter)
    wall_s: float = 0.0


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def rss_mib(pid: int | None) -> float | None:
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


async def one_request(client: httpx.AsyncClient, body: dict[str, object], result: Round, rate: int) -> None:
    start = time.monotonic()
    try:
        while True:
            async with client.stream("POST", "/v1/audio/speech", json=body) as response:
                if response.status_code == 503:  # as a well-behaved client does: wait as told, then again
                    await response.aread()
                    result.retries += 1
                    await asyncio.sleep(float(response.headers.get("retry-after", "1")))
                    continue
                if response.status_code != 200:
                    await response.aread()
                    result.errors[str(response.status_code)] += 1
                    return
                received = 0
                async for chunk in response.aiter_bytes():
                    if received == 0 and chunk:
                        result.ttfbs.append(time.monotonic() - start)
                    received += len(chunk)
                break
    except httpx.HTTPError as exc:
        result.errors[type(exc).__name__] += 1
        return
    result.latencies.append(time.monotonic() - start)
    result.audio_s += received / PCM_BYTES_PER_SAMPLE / rate


@dataclass
class Abuse:
    """Hostile connections kept open through the rounds; ``closed`` counts those the server ended."""

    url: str
    headers: dict[str, str]
    long_body: bytes
    closed: Counter[str] = field(default_factory=Counter)
    stop: bool = False

    def opening(self, kind: str, host: str) -> bytes:
        """What a hostile connection of ``kind`` sends first."""
        if kind == "slowloris":
            return f"POST /v1/audio/speech HTTP/1.1\r\nHost: {host}\r\n".encode()
        if kind == "stalled":
            auth = "".join(f"{k}: {v}\r\n" for k, v in self.headers.items())
            head = (f"POST /v1/audio/speech HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                    f"{auth}Content-Length: {len(self.long_body)}\r\n\r\n")  # fmt: skip
            return head.encode() + self.long_body
        if kind == "garbage":
            return os.urandom(512) + b"\r\n\r\n"
        return b""  # idle: nothing at all

    def trickle(self, kind: str, line: int) -> bytes:
        """What it sends each second after, while the server keeps it open (slowloris: one more header line)."""
        return f"X-Line-{line}: x\r\n".encode() if kind == "slowloris" else b""

    async def connection(self, kind: str) -> None:
        host, port = self.url.split("://")[-1].split(":")
        while not self.stop:
            try:
                reader, writer = await asyncio.open_connection(host, int(port), limit=1024)
            except OSError:
                await asyncio.sleep(0.5)
                continue
            try:
                writer.write(self.opening(kind, host))
                if kind == "stalled":  # reads nothing (the server must notice by itself: its log says), for a while
                    await writer.drain()
                    await asyncio.sleep(STALLED_HOLD_S)
                    continue
                line = 0
                while not self.stop and not reader.at_eof():
                    writer.write(self.trickle(kind, line))
                    line += 1
                    await writer.drain()
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(reader.read(1024), 1.0)
                if not self.stop:
                    self.closed[kind] += 1
            except OSError:
                if not self.stop:
                    self.closed[kind] += 1
            finally:
                writer.close()


async def run_round(
    url: str, headers: dict[str, str], body: dict[str, object], clients: int, requests: int, rate: int
) -> Round:
    result = Round()
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(requests):
        queue.put_nowait(i)

    async def client_loop(client: httpx.AsyncClient) -> None:
        while True:
            try:
                queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            await one_request(client, body, result, rate)

    start = time.monotonic()
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=None) as client:
        await asyncio.gather(*(client_loop(client) for _ in range(clients)))
    result.wall_s = time.monotonic() - start
    return result


def start_server(model: str, extra: list[str], log_path: str) -> tuple[str, subprocess.Popen[bytes]]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "ggtts.server", "-m", model, "--port", str(port), *extra]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            sys.exit(f"the server exited with status {process.returncode}: {' '.join(cmd)}")
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return url, process
        except httpx.TransportError:
            time.sleep(0.5)
    process.kill()
    sys.exit(f"the server did not start within {STARTUP_TIMEOUT_S:g} s")


def server_cuts(log_path: str | None) -> Counter[str]:
    """How many hostile connections the server's log says it ended, by which bound."""
    if log_path is None:
        return Counter()
    with open(log_path, errors="replace") as f:
        text = f.read()
    cuts: Counter[str] = Counter()
    for name, mark in SERVER_CUTS.items():
        for match in mark.finditer(text):
            cuts[name] += int(match[1]) if match.groups() else 1
    return cuts


async def run_with_abuse(abuse: Abuse | None, count: int, stalled: int, run: Any) -> Round:
    """``run`` (a round) while ``count`` hostile connections of each kind in turn, and ``stalled`` readers, hold on."""
    if abuse is None:
        return await run
    kinds = [ABUSE_KINDS[i % len(ABUSE_KINDS)] for i in range(count)] + ["stalled"] * stalled
    tasks = [asyncio.ensure_future(abuse.connection(kind)) for kind in kinds]
    await asyncio.sleep(2.0)  # the hostile connections settle in first
    try:
        return await run
    finally:
        abuse.stop = True
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        abuse.stop = False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("-m", "--model", help="start a server on this model spec (as for ggtts serve -m)")
    where.add_argument("--url", help="use a running server")
    parser.add_argument("--pid", type=int, default=None, help="the running server's pid, to read its RSS")
    parser.add_argument("--model-name", default=None, help="model name in requests (default: the server's first)")
    parser.add_argument("--voice", default=None)
    parser.add_argument("--text", default=DEFAULT_TEXT)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--requests", type=int, default=16, help="requests per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-queue", type=int, default=64, help="for a server started here")
    parser.add_argument("--server-args", default="", help="more options for a server started here")
    parser.add_argument("--abusive", type=int, default=0, help="hostile connections held through each round")
    parser.add_argument("--stalled", type=int, default=0, help="stalled readers held through each round")
    args = parser.parse_args()

    process = None
    log_path = None
    if args.model:
        log_path = os.path.join(tempfile.mkdtemp(prefix="ggtts-load-"), "server.log")
        extra = ["--max-queue", str(args.max_queue), *shlex.split(args.server_args)]
        url, process = start_server(args.model, extra, log_path)
        pid = process.pid
    else:
        url, pid = args.url.rstrip("/"), args.pid
    key = os.environ.get("GGTTS_API_KEY")
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    try:
        models = httpx.get(url + "/v1/models", headers=headers).json()["data"]
        card = next(m for m in models if args.model_name in (None, m["id"]))
        body: dict[str, object] = {
            "model": card["id"],
            "input": args.text,
            "response_format": "pcm",
            "stream": True,
        }
        if args.voice:
            body["voice"] = args.voice
        long_text = " ".join([args.text] * 8)
        long_body = json.dumps({**body, "input": long_text[:4000]}).encode()
        abuse = Abuse(url, headers, long_body) if args.abusive or args.stalled else None
        print(f"server {url}  model {card['id']}  clients {args.clients}  requests/round {args.requests}")
        if abuse is not None:
            kinds = ", ".join(ABUSE_KINDS)
            print(f"held through each round: {args.abusive} hostile connections ({kinds}), {args.stalled} stalled")
        print("round  req/s  audio s/s  p50 s  p90 s  p99 s  ttfb p50  ttfb p90  errors  rss before->after MiB")
        for n in range(1, args.rounds + 1):
            before = rss_mib(pid)
            cuts_before = server_cuts(log_path)
            round_ = run_round(url, headers, body, args.clients, args.requests, card["sample_rate"])
            r = asyncio.run(run_with_abuse(abuse, args.abusive, args.stalled, round_))
            after = rss_mib(pid)
            cuts = server_cuts(log_path) - cuts_before
            ok = len(r.latencies)
            errors = ",".join(f"{k}:{v}" for k, v in sorted(r.errors.items())) or "0"
            rss = f"{before:.0f}->{after:.0f}" if before is not None and after is not None else "n/a"
            lat = [percentile(r.latencies, q) for q in (50, 90, 99)]
            print(
                f"{n:5d}  {ok / r.wall_s:5.2f}  {r.audio_s / r.wall_s:9.2f}  "
                f"{lat[0]:5.2f}  {lat[1]:5.2f}  {lat[2]:5.2f}  "
                f"{percentile(r.ttfbs, 50):8.3f}  {percentile(r.ttfbs, 90):8.3f}  {errors:>6}  {rss}"
            )
            if abuse is not None:
                ended = ", ".join(f"{k} {v}" for k, v in sorted(cuts.items())) or "none"
                print(
                    f"       {ok} of {args.requests} answered, {r.retries} retries after a 503; the server ended "
                    f"hostile connections by: {ended}"
                )
    finally:
        if process is not None:
            process.terminate()
            process.wait(timeout=30)


if __name__ == "__main__":
    main()
