"""What a Qwen2 GGUF costs in memory in ggtts, apart from what any ggtts process holds once it has run a model.

    python benchmarks/qwen2_memory.py FILE.gguf [FILE.gguf ...] [--prompt 128] [--new 32]

For each file, in a fresh process: RSS after import; after loading and running a tiny random Qwen2 (torch's and
ggml's first-use state, code pages: the same for every model); after loading the file; after a prompt and some
decoding steps. The model's cost is the last minus the second, split into file-backed pages (the weights ggml
reads from the memory-mapped file) and anonymous memory (repacked weights, norms, KV cache, graph buffers).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

TINY = {
    "vocab_size": 512,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
}


def rss() -> dict[str, int]:
    fields = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile"):
                fields[key] = int(value.split()[0]) // 1024
    return fields


def measure(path: Path, tiny: Path, n_prompt: int, n_new: int) -> dict[str, dict[str, int]]:
    import torch

    from ggtts.gguf import GGUFFile
    from ggtts.models.qwen2.model import Qwen2Model

    torch.set_num_threads(1)
    stages = {"import": rss()}

    def use(model: Qwen2Model) -> None:
        cache = model.new_cache(n_prompt + n_new + 1)
        with torch.inference_mode():
            token = model(torch.randint(0, 256, (1, n_prompt)), cache, last_only=True)[:, -1:].argmax(-1)
            for _ in range(n_new):
                token = model(token, cache, last_only=True)[:, -1:].argmax(-1)

    use(Qwen2Model.from_gguf(GGUFFile(tiny), max_len=n_prompt + n_new + 1))
    stages["after a tiny model"] = rss()
    model = Qwen2Model.from_gguf(GGUFFile(path), max_len=n_prompt + n_new + 1)
    stages["loaded"] = rss()
    use(model)
    stages["used"] = rss()
    return stages


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="*", type=Path)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--new", type=int, default=32)
    ap.add_argument("--tiny", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--run", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.run:
        print(json.dumps(measure(args.run, args.tiny, args.prompt, args.new)))
        return
    if not args.files:
        ap.error("give at least one GGUF file")
    from bench_qwen2 import build

    tiny_dir = Path(tempfile.mkdtemp(prefix="qwen2-memory-"))
    build(tiny_dir, TINY, types=("q8_0",))
    tiny = tiny_dir / "qwen2-q8_0.gguf"
    print(f"{'file':28} {'MiB':>6} {'base':>6} {'weights (file pages)':>21} {'anon':>6} {'model / file':>13}")
    for path in args.files:
        cmd = [sys.executable, __file__, "--run", str(path), "--tiny", str(tiny)]
        cmd += ["--prompt", str(args.prompt), "--new", str(args.new)]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
        s = json.loads(out)
        base, used = s["after a tiny model"], s["used"]
        file_pages, anon = used["RssFile"] - base["RssFile"], used["RssAnon"] - base["RssAnon"]
        size = path.stat().st_size / 2**20
        print(
            f"{path.name:28} {size:>6.0f} {base['VmRSS']:>6} {file_pages:>21} {anon:>6} "
            f"{(file_pages + anon) / size:>12.2f}x"
        )


if __name__ == "__main__":
    main()
