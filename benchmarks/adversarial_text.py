"""How long the text frontends take on pathological text, at 1k, 10k and 100k characters.

Each row is a family of hostile input (runs of punctuation, combining marks, digits with separators, dotted
names, brackets, ...) and the time the frontend takes to turn it into what the model reads: for Kokoro the
normalizer, the misaki G2P and the chunker (``text_to_phoneme_chunks``); for OuteTTS its text cleaning and the
Qwen2 tokenizer's pre-tokenization pattern. A frontend whose cost is linear in the input takes about 10x longer
at 100k than at 10k; the table prints that ratio. Runs each case in a fresh subprocess with a time limit, so a
blow-up is reported instead of hanging the benchmark.

    python benchmarks/adversarial_text.py                 # every row, 1k/10k/100k
    python benchmarks/adversarial_text.py --sizes 1000,10000 --only apostrophes
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

# name -> (unit repeated to the length, or a builder)
FAMILIES: dict[str, str] = {
    "apostrophes": "'",
    "apostrophe+backtick": "'`",
    "apostrophe+space": "' ",
    "letter+apostrophe": "a'",
    "open brackets": "[",
    "brackets+letter": "[a",
    "combining accents": "e" + "\u0301" * 999,
    "combining (spaced)": "e\u0301\u0302\u0303 ",
    "a.": "a.",
    "1.": "1.",
    "-.": "-.",
    "1-": "1-",
    "a.a...@x": "a.",
    "digits with commas": "1,000",
    "digits": "1234567890",
    "$1,000": "$1,000 ",
    "dashes": "-",
    "mixed punctuation": "?!.,;:",
    "emoji": "\U0001f600",
    "CJK": "\u6f22\u5b57\u304b\u306a",
    "URL-like": "http://a.b/c?d=e&",
    "plain words": "the quick brown fox jumps over the lazy dog. ",
}

_WORKER = r"""
import json, sys, time
family, unit, n, frontend = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
text = (unit * (n // len(unit) + 1))[:n]
if family == "a.a...@x":
    text = text[: n - 2] + "@x"
if frontend == "kokoro":
    from ggtts.text.frontend import text_to_phoneme_chunks
    from ggtts.text.g2p import get_g2p
    get_g2p("a").load()
    run = lambda: sum(1 for _ in text_to_phoneme_chunks(text, "a"))
else:
    # OuteTTS: its text cleaning, then the byte-level BPE tokenizer ggtts runs (a synthetic merge table: every
    # pair of letters, then every pair of those, so long letter runs take many merge rounds)
    import string
    from ggtts.families.outetts.prompt import OuteTTSVersion, process_text
    from ggtts.models.qwen2.tokenizer import BPETokenizer, byte_to_unicode
    letters = string.ascii_lowercase
    pairs = [a + " " + b for a in letters for b in letters]
    quads = [a + b + " " + a + b for a in letters for b in letters]
    alphabet = list(byte_to_unicode().values())
    tokens = alphabet + [p.replace(" ", "") for p in pairs + quads] + ["<|space|>", "<|text_sep|>"]
    types = [1] * (len(tokens) - 2) + [3, 3]
    tokenizer = BPETokenizer(tokens, pairs + quads, types)
    run = lambda: len(tokenizer.encode(process_text(text, OuteTTSVersion.V0_3)))
start = time.perf_counter()
try:
    run()
    error = None
except Exception as e:
    error = f"{type(e).__name__}: {e}"[:200]
print(json.dumps({"seconds": time.perf_counter() - start, "error": error}))
"""


def measure(family: str, n: int, frontend: str, limit_s: float) -> tuple[float | None, str | None]:
    """(seconds, error) for one case in a fresh interpreter; (None, "over N s") past the limit."""
    command = [sys.executable, "-c", _WORKER, family, FAMILIES[family], str(n), frontend]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=limit_s + 30)
    except subprocess.TimeoutExpired:
        return None, f"over {limit_s:g} s"
    if done.returncode != 0:
        return None, (done.stderr.strip().splitlines() or ["crashed"])[-1]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if result["seconds"] > limit_s:
        return result["seconds"], f"over {limit_s:g} s"
    return result["seconds"], result["error"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,10000,100000", help="text lengths in characters")
    parser.add_argument("--frontends", default="kokoro,outetts", help="which frontends to time")
    parser.add_argument("--only", default=None, help="comma-separated row names")
    parser.add_argument("--limit", type=float, default=120.0, help="seconds before a case counts as a blow-up")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    names = args.only.split(",") if args.only else list(FAMILIES)
    rows = []
    for frontend in args.frontends.split(","):
        for name in names:
            times: dict[int, float | None] = {}
            errors = []
            for n in sizes:
                seconds, error = measure(name, n, frontend, args.limit)
                times[n] = seconds
                if error:
                    errors.append(f"{n}: {error}")
            rows.append({"frontend": frontend, "family": name, "seconds": times, "errors": errors})
            if not args.json:
                _print_row(rows[-1], sizes, header=len(rows) == 1)
    if args.json:
        print(json.dumps(rows, indent=2))
    return 0


def _print_row(row: dict, sizes: list[int], *, header: bool) -> None:
    if header:
        cols = "".join(f"{f'{n // 1000}k':>9}" for n in sizes)
        print(f"{'frontend':9} {'input':22}{cols}  {'ratio':>7}  errors")
    times = row["seconds"]
    cells = "".join(f"{times[n]:9.3f}" if times[n] is not None else f"{'-':>9}" for n in sizes)
    a, b = (times.get(10_000), times.get(100_000))
    ratio = f"{b / max(a, 1e-3):7.1f}" if a is not None and b is not None else f"{'':7}"
    print(f"{row['frontend']:9} {row['family']:22}{cells}  {ratio}  {'; '.join(row['errors'])}", flush=True)


if __name__ == "__main__":
    time.sleep(0)
    sys.exit(main())
