"""``ggtts parity kokoro``: ggtts against hexgrad's kokoro, stage by stage, on a tiny random model.

A tiny upstream model is built with random weights (:mod:`ggtts.measure.kokoro_upstream`), written to a
GGUF file by our converter, loaded by our loader, and both run on the same tokens and style. Each stage gets
the same inputs on both sides (the decoder takes upstream's own features), so an error shows where it starts:

    stage        max abs diff   correlation   std ratio   tolerance   ok

The tolerance is on the largest absolute difference, relative to the largest upstream value (at least 1).
The command exits non-zero when any stage is out of tolerance.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from ggtts.errors import GGTTSError

FAMILIES = ("kokoro",)
SEED = 1234
TEXT = "hello world, this is a test."
# stage -> tolerance on max |ours - upstream| / max(1, max |upstream|)
TOLERANCES = {
    "bert": 1e-4,
    "durations": 0.0,  # integer frame counts: must be equal
    "f0": 1e-4,
    "n": 1e-4,
    "asr": 1e-4,
    "decoder": 1e-4,
    "end_to_end": 1e-3,  # F0 differences of 1e-5 shift the harmonic source's phase, which accumulates
}


@dataclass(frozen=True)
class StageResult:
    stage: str
    shape: list[int]
    max_abs_diff: float
    correlation: float
    std_ratio: float  # std(ours) / std(upstream)
    tolerance: float
    ok: bool


def compare(stage: str, ours: torch.Tensor, theirs: torch.Tensor) -> StageResult:
    tolerance = TOLERANCES[stage]
    if ours.shape != theirs.shape:
        return StageResult(stage, list(ours.shape), float("inf"), float("nan"), float("nan"), tolerance, False)
    a, b = ours.detach().double().flatten(), theirs.detach().double().flatten()
    diff = (a - b).abs().max().item() if a.numel() else 0.0
    scale = max(1.0, b.abs().max().item() if b.numel() else 0.0)
    std_a, std_b = a.std().item(), b.std().item()
    corr = torch.corrcoef(torch.stack([a, b]))[0, 1].item() if std_a > 0 and std_b > 0 else float(torch.equal(a, b))
    ratio = std_a / std_b if std_b > 0 else float(std_a == 0)
    return StageResult(stage, list(ours.shape), diff, corr, ratio, tolerance, diff <= tolerance * scale)


def kokoro_parity() -> list[StageResult]:
    """Build, convert, load and run a tiny Kokoro both ways; one result per stage."""
    try:
        from ggtts.measure.kokoro_upstream import build_upstream, random_voices, tiny_config, upstream_stages
    except ModuleNotFoundError as e:
        raise GGTTSError(f"parity needs the upstream package '{e.name}' (pip install 'ggtts[reference]')") from None
    from ggtts.convert.kokoro_gguf import write_kokoro_gguf
    from ggtts.gguf import GGUFFile
    from ggtts.models.kokoro import load_kokoro

    config = tiny_config()
    try:
        with warnings.catch_warnings():  # upstream's deprecated weight_norm and single-layer LSTM dropout
            warnings.simplefilter("ignore", (UserWarning, FutureWarning))
            parts = build_upstream(config)
    except ModuleNotFoundError as e:
        raise GGTTSError(f"parity needs the upstream package '{e.name}' (pip install 'ggtts[reference]')") from None
    voices = random_voices(config)
    with tempfile.TemporaryDirectory(prefix="ggtts-parity-") as tmp:
        path = write_kokoro_gguf(Path(tmp) / "tiny.gguf", config, parts.folded_state(), voices, "f32", name="tiny")
        _, model, loaded_voices, vocab = load_kokoro(GGUFFile(path))
    ids = torch.tensor([[0, *(vocab[c] for c in TEXT if c in vocab), 0]])
    ref_s = loaded_voices["v_one"][ids.shape[1] - 3]  # (1, 2 * style)
    want = upstream_stages(parts, ids, ref_s, config["style_dim"], SEED)
    with torch.inference_mode():
        prosody = model.encode_prosody(ids, ref_s)
        f0, n = model.predict_f0_n(prosody, ref_s)
        asr = model.encode_text(ids, want["durations"])
        decoded = model.decode(want["asr"], want["f0"], want["n"], ref_s, torch.Generator().manual_seed(SEED))
        audio, _ = model(ids, ref_s, 1.0, torch.Generator().manual_seed(SEED))
        bert = model.bert(ids)
    return [
        compare("bert", bert, want["bert"]),
        compare("durations", prosody.durations, want["durations"]),
        compare("f0", f0, want["f0"]),
        compare("n", n, want["n"]),
        compare("asr", asr, want["asr"]),
        compare("decoder", decoded.squeeze(), want["audio"]),
        compare("end_to_end", audio.squeeze(), want["audio"]),
    ]


def print_table(results: list[StageResult], out: Any = None) -> None:
    out = out or sys.stdout
    print(
        f"{'stage':<12}{'shape':>16}{'max abs diff':>14}{'correlation':>13}{'std ratio':>11}{'tolerance':>11}  ok",
        file=out,
    )
    for r in results:
        shape = "x".join(str(s) for s in r.shape) or "scalar"
        print(
            f"{r.stage:<12}{shape:>16}{r.max_abs_diff:>14.3g}{r.correlation:>13.6f}{r.std_ratio:>11.6f}"
            f"{r.tolerance:>11.0e}  {'yes' if r.ok else 'NO'}",
            file=out,
        )


def run(args: argparse.Namespace) -> int:
    if args.family not in FAMILIES:
        raise GGTTSError(f"no parity check for '{args.family}'; available: {', '.join(FAMILIES)}")
    results = kokoro_parity()
    ok = all(r.ok for r in results)
    if args.json:
        json.dump({"family": args.family, "ok": ok, "stages": [asdict(r) for r in results]}, sys.stdout, indent=2)
        print()
    else:
        print_table(results)
        print("parity: " + ("all stages within tolerance" if ok else "some stages are OUT of tolerance"))
    return 0 if ok else 1
