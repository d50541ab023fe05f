"""``ggtts parity FAMILY``: a family against its upstream reference, stage by stage.

The family's record names its check (Kokoro's: :mod:`ggtts.measure.kokoro.parity`); this module has what every
check shares: one result per stage, the comparison, the table and the command. Each stage gets the same inputs
on both sides, so an error shows where it starts:

    stage   dtype   max abs diff   peak   diff / peak   correlation   std ratio   tolerance   ok

A stage passes when ``max |ours - upstream| / max |upstream|`` is at most its tolerance: the number printed is
the number applied. The command exits non-zero when any stage is out of tolerance.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import torch

from ggtts.errors import GGTTSError


@dataclass(frozen=True)
class StageResult:
    stage: str
    dtype: str
    shape: list[int]
    max_abs_diff: float
    peak: float  # max |upstream|
    relative: float  # max_abs_diff / peak
    correlation: float
    std_ratio: float  # std(ours) / std(upstream)
    tolerance: float  # on ``relative``
    ok: bool


def compare(
    stage: str, ours: torch.Tensor, theirs: torch.Tensor, tolerances: Mapping[str, tuple[str, float]]
) -> StageResult:
    """One stage: ours against upstream's, with ``tolerances[stage]`` = (dtype compared in, tolerance)."""
    dtype, tolerance = tolerances[stage]
    if ours.shape != theirs.shape:
        nan = float("nan")
        return StageResult(stage, dtype, list(ours.shape), float("inf"), nan, float("inf"), nan, nan, tolerance, False)
    a, b = ours.detach().double().flatten(), theirs.detach().double().flatten()
    diff = (a - b).abs().max().item() if a.numel() else 0.0
    peak = b.abs().max().item() if b.numel() else 0.0
    relative = diff / peak if peak > 0 else (0.0 if diff == 0 else float("inf"))
    std_a, std_b = a.std().item(), b.std().item()
    corr = torch.corrcoef(torch.stack([a, b]))[0, 1].item() if std_a > 0 and std_b > 0 else float(torch.equal(a, b))
    ratio = std_a / std_b if std_b > 0 else float(std_a == 0)
    ok = relative <= tolerance
    return StageResult(stage, dtype, list(ours.shape), diff, peak, relative, corr, ratio, tolerance, ok)


def print_table(results: list[StageResult], out: Any = None) -> None:
    out = out or sys.stdout
    w = max([11, *(len(r.stage) + 1 for r in results)])
    print(
        f"{'stage':<{w}}{'dtype':>8}{'shape':>10}{'max abs diff':>14}{'peak':>10}{'diff/peak':>11}"
        f"{'correlation':>13}{'std ratio':>11}{'tolerance':>11}  ok",
        file=out,
    )
    for r in results:
        shape = "x".join(str(s) for s in r.shape) or "scalar"
        print(
            f"{r.stage:<{w}}{r.dtype:>8}{shape:>10}{r.max_abs_diff:>14.3g}{r.peak:>10.4g}{r.relative:>11.3g}"
            f"{r.correlation:>13.6f}{r.std_ratio:>11.6f}{r.tolerance:>11.0e}  {'yes' if r.ok else 'NO'}",
            file=out,
        )


def run(args: argparse.Namespace) -> int:
    from ggtts.families import families
    from ggtts.families.base import import_target

    checks = {f.name: f.parity for f in families() if f.parity}
    if args.family not in checks:
        raise GGTTSError(f"no parity check for '{args.family}'; available: {', '.join(checks)}")
    results: list[StageResult] = import_target(checks[args.family])()
    ok = all(r.ok for r in results)
    if args.json:
        json.dump({"family": args.family, "ok": ok, "stages": [asdict(r) for r in results]}, sys.stdout, indent=2)
        print()
    else:
        print_table(results)
        print("parity: tolerance is on max |ours - upstream| / max |upstream|")
        print("parity: " + ("all stages within tolerance" if ok else "some stages are OUT of tolerance"))
    return 0 if ok else 1
