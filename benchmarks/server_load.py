"""Load on the speech server: N concurrent clients send a fixed number of streamed requests, over rounds.

Prints per round: throughput (requests/s, seconds of audio per second), latency and time-to-first-byte
percentiles, errors by status, and the server's resident memory before and after (a leak shows as RSS
growing round after round).

    python benchmarks/server_load.py -m kokoro --clients 4 --requests 16 --rounds 3
    python benchmarks/server_load.py --url http://127.0.0.1:8000 --pid 1234 --model-name kokoro

With ``-m`` it starts ``python -m ggtts.server`` on a free loopback port and stops it at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field

import httpx

DEFAULT_TEXT = "The quick brown fox jumps over the lazy dog. It was a bright cold day in April."
PCM_BYTES_PER_SAMPLE = 2
STARTUP_TIMEOUT_S = 600.0


@dataclass
class Round:
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
        async with client.stream("POST", "/v1/audio/speech", json=body) as response:
            if response.status_code != 200:
                await response.aread()
                result.errors[str(response.status_code)] += 1
                return
            received = 0
            async for chunk in response.aiter_bytes():
                if received == 0 and chunk:
                    result.ttfbs.append(time.monotonic() - start)
                received += len(chunk)
    except httpx.HTTPError as exc:
        result.errors[type(exc).__name__] += 1
        return
    result.latencies.append(time.monotonic() - start)
    result.audio_s += received / PCM_BYTES_PER_SAMPLE / rate


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


def start_server(model: str, extra: list[str]) -> tuple[str, subprocess.Popen[bytes]]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "ggtts.server", "-m", model, "--port", str(port), *extra]
    process = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
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
    args = parser.parse_args()

    process = None
    if args.model:
        url, process = start_server(args.model, ["--max-queue", str(args.max_queue)])
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
        print(f"server {url}  model {card['id']}  clients {args.clients}  requests/round {args.requests}")
        print("round  req/s  audio s/s  p50 s  p90 s  p99 s  ttfb p50  ttfb p90  errors  rss before->after MiB")
        for n in range(1, args.rounds + 1):
            before = rss_mib(pid)
            r = asyncio.run(run_round(url, headers, body, args.clients, args.requests, card["sample_rate"]))
            after = rss_mib(pid)
            ok = len(r.latencies)
            errors = ",".join(f"{k}:{v}" for k, v in sorted(r.errors.items())) or "0"
            rss = f"{before:.0f}->{after:.0f}" if before is not None and after is not None else "n/a"
            lat = [percentile(r.latencies, q) for q in (50, 90, 99)]
            print(
                f"{n:5d}  {ok / r.wall_s:5.2f}  {r.audio_s / r.wall_s:9.2f}  "
                f"{lat[0]:5.2f}  {lat[1]:5.2f}  {lat[2]:5.2f}  "
                f"{percentile(r.ttfbs, 50):8.3f}  {percentile(r.ttfbs, 90):8.3f}  {errors:>6}  {rss}"
            )
    finally:
        if process is not None:
            process.terminate()
            process.wait(timeout=30)


if __name__ == "__main__":
    main()
