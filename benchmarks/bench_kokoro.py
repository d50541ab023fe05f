"""Kokoro benchmark: ggtts against kokoro-onnx (onnxruntime) and hexgrad's kokoro (torch), in one run.

Same ~60-word paragraph, same voice, same phonemes and the same weights for all three: the default model's
GGUF, the int8 ONNX file it is converted from, and the GGUF's weights loaded into hexgrad's ``KModel``. Each
engine runs in its own process (peak memory is per engine), with one warm-up and then ``--runs`` timed runs.

    python benchmarks/bench_kokoro.py [--runs 3] [--json] [--plot bench.png]

Prints RTF, time to first audio (streaming) and peak memory per engine, and ggtts's ratio to each peer.
"""

from __future__ import annotations

import argparse
import json
import sys

from ggtts.api import resolve_model_path
from ggtts.errors import GGTTSError
from ggtts.measure.kokoro import bench
from ggtts.measure.sentences import BENCH_PARAGRAPH

PEERS = ("ggtts", "onnx", "reference")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-m", "--model", default=None, help="Kokoro GGUF (default: the built-in model)")
    p.add_argument("--runs", type=int, default=3, help="timed runs per engine after one warm-up (default 3)")
    p.add_argument("--json", action="store_true", help="print the full report as JSON")
    p.add_argument("--plot", default=None, help="also draw the figures into this PNG")
    args = p.parse_args(argv)
    try:
        report = bench.benchmark(resolve_model_path(args.model), BENCH_PARAGRAPH, PEERS, args.runs)
    except GGTTSError as e:
        print(f"bench_kokoro: error: {e}", file=sys.stderr)
        return 1
    if args.json:
        json.dump(report, sys.stdout, indent=2, ensure_ascii=False)
        print()
    else:
        bench.print_table(report)
    if args.plot:
        print(f"bench_kokoro: wrote {bench.plot(report, args.plot)}", file=sys.stderr)
    return 1 if any("error" in r for r in report["peers"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
