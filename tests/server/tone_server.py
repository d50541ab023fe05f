"""Runs the real server (uvicorn, loopback) on tone models: ``python tone_server.py --port N [options]``.

Used by the tests that need a model whose timing and failures they control; the tests of the API on a real
model file start ``python -m ggtts.server`` instead.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from tone_model import ToneModel

from ggtts.server import run
from ggtts.server.settings import ServerSettings

SLOW_CHUNK_DELAY_S = 0.3
LONG_CHUNK_S = 8.0


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--max-queue", type=int, default=1)
    parser.add_argument("--max-input-chars", type=int, default=2000)
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--send-timeout", type=float, default=60.0)
    parser.add_argument("--request-timeout", type=float, default=30.0)
    parser.add_argument("--max-connections", type=int, default=512)
    parser.add_argument("--idle-grace", type=float, default=0.25)  # ServerSettings.idle_grace_s
    parser.add_argument("--long-model", action="store_true")
    args = parser.parse_args()
    models = {
        "tone": ToneModel(),
        "slow": ToneModel(delay_s=SLOW_CHUNK_DELAY_S),
        "tone16k": ToneModel(sample_rate=16000),
    }
    if args.long_model:
        models["long"] = ToneModel(chunk_s=LONG_CHUNK_S)  # 384 KB of pcm a word: streams larger than buffers hold
    settings = ServerSettings(
        api_key=args.api_key,
        max_queue=args.max_queue,
        max_input_chars=args.max_input_chars,
        timeout_s=args.timeout,
        send_timeout_s=args.send_timeout,
        request_timeout_s=args.request_timeout,
        max_connections=args.max_connections,
        idle_grace_s=args.idle_grace,
    )
    run(models, settings, "127.0.0.1", args.port)


if __name__ == "__main__":
    main()
