"""Load on ggtts's Wyoming server: well-formed clients beside hostile connections, over rounds.

    python benchmarks/wyoming_load.py -m piper-joe --clients 2 --requests 8 --rounds 3 --abusive 300 --stalled 2 \
        --server-args "--send-timeout 5 --request-timeout 5 --max-connections 200"

Starts ``ggtts wyoming`` on a free loopback port. Each round, ``--clients`` well-formed clients share
``--requests`` ``synthesize`` requests (a connection each, as Home Assistant makes them), reading every audio chunk
to ``audio-stop``; a refusal at the connection cap (an ``error`` event, ``too_many_connections``) is retried after a
second and counted. ``--abusive N`` hostile connections run through every round, each opening another when the
server ends it: a third connect and say nothing, a third send garbage lines, a third announce an event whose data
never comes; ``--stalled K`` more ask for a long text and read none of the audio for a while (server_load's
``Abuse``, speaking Wyoming). Printed per round: requests answered, errors, retries, latency and first-chunk
percentiles, seconds of audio per second, the hostile connections the server ended, and its resident memory.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shlex
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field

from server_load import Abuse, percentile, rss_mib, server_cuts
from wyoming.audio import AudioChunk, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.error import Error
from wyoming.info import Describe, Info
from wyoming.tts import Synthesize

TEXT = "The quick brown fox jumps over the lazy dog. It was a bright cold day in April."
LONG_TEXT = " ".join([TEXT] * 20)
STARTUP_TIMEOUT_S = 600.0
ABUSE_KINDS = ("idle", "garbage", "half")


@dataclass
class Round:
    answered: int = 0
    retries: int = 0
    latencies: list[float] = field(default_factory=list)
    firsts: list[float] = field(default_factory=list)
    audio_s: float = 0.0
    errors: Counter[str] = field(default_factory=Counter)
    wall_s: float = 0.0


async def one_request(port: int, result: Round) -> None:
    start = time.monotonic()
    while True:
        try:
            async with AsyncTcpClient("127.0.0.1", port) as client:
                await client.write_event(Synthesize(text=TEXT).event())
                first, samples = None, 0
                while True:
                    event = await client.read_event()
                    if event is None:
                        result.errors["closed"] += 1
                        return
                    if Error.is_type(event.type):
                        error = Error.from_event(event)
                        if error.code == "too_many_connections":
                            break  # refused at the cap: again in a moment
                        result.errors[error.code or "error"] += 1
                        return
                    if AudioChunk.is_type(event.type):
                        chunk = AudioChunk.from_event(event)
                        first = first or time.monotonic() - start
                        samples += len(chunk.audio) // chunk.width
                        rate = chunk.rate
                    elif AudioStop.is_type(event.type):
                        result.answered += 1
                        result.latencies.append(time.monotonic() - start)
                        if first is not None:
                            result.firsts.append(first)
                            result.audio_s += samples / rate
                        return
        except OSError as exc:
            result.errors[type(exc).__name__] += 1
            return
        result.retries += 1
        await asyncio.sleep(1.0)


class WyomingAbuse(Abuse):
    """server_load's hostile connections, speaking (badly) Wyoming's events instead of HTTP."""

    def opening(self, kind: str, host: str) -> bytes:
        if kind == "garbage":
            return os.urandom(256).replace(b"\n", b" ") + b"\n"
        if kind == "half":  # an event announcing data that never comes
            return json.dumps({"type": "synthesize", "data_length": 10_000}).encode() + b"\n{"
        if kind == "stalled":  # a long text whose audio is never read
            return json.dumps({"type": "synthesize", "data": {"text": LONG_TEXT}}).encode() + b"\n"
        return b""  # idle

    def trickle(self, kind: str, line: int) -> bytes:
        return b""


async def run_round(port: int, clients: int, requests: int, abuse: Abuse | None, count: int, stalled: int) -> Round:
    result = Round()
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(requests):
        queue.put_nowait(i)

    async def client_loop() -> None:
        while True:
            try:
                queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            await one_request(port, result)

    tasks: list[asyncio.Future[None]] = []
    if abuse is not None:
        kinds = [ABUSE_KINDS[i % len(ABUSE_KINDS)] for i in range(count)] + ["stalled"] * stalled
        tasks = [asyncio.ensure_future(abuse.connection(kind)) for kind in kinds]
        await asyncio.sleep(2.0)  # the hostile connections settle in first
    start = time.monotonic()
    try:
        await asyncio.gather(*(client_loop() for _ in range(clients)))
    finally:
        result.wall_s = time.monotonic() - start
        if abuse is not None:
            abuse.stop = True
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            abuse.stop = False
    return result


def start_server(model: str, extra: list[str], log_path: str) -> tuple[int, subprocess.Popen[bytes]]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "ggtts.cli", "wyoming", "-m", model, "--uri", f"tcp://127.0.0.1:{port}", *extra]
    with open(log_path, "wb") as log:
        process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            sys.exit(f"the server exited with status {process.returncode}: {' '.join(cmd)}")
        with contextlib.suppress(OSError):
            if asyncio.run(_describe(port)):
                return port, process
        time.sleep(0.5)
    process.kill()
    sys.exit(f"the server did not start within {STARTUP_TIMEOUT_S:g} s")


async def _describe(port: int) -> bool:
    async with AsyncTcpClient("127.0.0.1", port) as client:
        await client.write_event(Describe().event())
        event = await asyncio.wait_for(client.read_event(), 5.0)
        return event is not None and Info.is_type(event.type)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-m", "--model", default="piper-joe")
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--requests", type=int, default=8, help="requests per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--abusive", type=int, default=0)
    parser.add_argument("--stalled", type=int, default=0)
    parser.add_argument("--server-args", default="")
    args = parser.parse_args()
    log_path = os.path.join(tempfile.mkdtemp(), "wyoming.log")
    port, process = start_server(args.model, shlex.split(args.server_args), log_path)
    abuse = WyomingAbuse(f"tcp://127.0.0.1:{port}", {}, b"") if args.abusive or args.stalled else None
    try:
        print(f"ggtts wyoming -m {args.model} {args.server_args}; {args.clients} clients, {args.requests} requests a "
              f"round, {args.abusive} hostile and {args.stalled} stalled connections; RSS {rss_mib(process.pid):.0f} "
              "MiB at start")  # fmt: skip
        for n in range(1, args.rounds + 1):
            r = asyncio.run(run_round(port, args.clients, args.requests, abuse, args.abusive, args.stalled))
            rss = rss_mib(process.pid)
            errors = ", ".join(f"{k} {v}" for k, v in r.errors.items()) or "none"
            print(f"round {n}: {r.answered}/{args.requests} answered in {r.wall_s:.1f} s, retries {r.retries}, "
                  f"errors {errors}; latency p50 {percentile(r.latencies, 50):.2f} s p90 "
                  f"{percentile(r.latencies, 90):.2f} s; first chunk p50 {percentile(r.firsts, 50):.2f} s; "
                  f"{r.audio_s / max(r.wall_s, 1e-9):.2f} s of audio/s; RSS {rss:.0f} MiB")  # fmt: skip
        if abuse is not None:
            print(f"hostile connections the server ended: {dict(abuse.closed) or 'none'}")
        with open(log_path, errors="replace") as f:
            log = f.read()
        print(f"server log: {dict(server_cuts(log_path)) or 'no connection cut'}, "
              f"{log.count('Traceback')} tracebacks, {log.count('ERROR')} ERROR lines")  # fmt: skip
    finally:
        process.terminate()
        process.wait(timeout=30)


if __name__ == "__main__":
    main()
