"""`ggtts parity kokoro`: a table per stage, --json, and a non-zero exit when a stage is out of tolerance."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("kokoro")
pytest.importorskip("transformers")

from ggtts.cli import main
from ggtts.measure import kokoro_upstream
from ggtts.measure.parity import TOLERANCES

pytestmark = pytest.mark.needs_reference


def test_parity_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parity", "kokoro", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["family"] == "kokoro" and report["ok"] is True
    assert [s["stage"] for s in report["stages"]] == list(TOLERANCES)
    for s in report["stages"]:
        assert set(s) == {"stage", "shape", "max_abs_diff", "correlation", "std_ratio", "tolerance", "ok"}
        assert s["ok"] and s["correlation"] > 0.999 and abs(s["std_ratio"] - 1) < 1e-3
    assert report["stages"][1]["max_abs_diff"] == 0  # durations are integers and must agree exactly


def test_parity_fails_on_a_wrong_weight(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    folded = kokoro_upstream.Upstream.folded_state

    def corrupted(self: kokoro_upstream.Upstream) -> dict[str, torch.Tensor]:
        state = folded(self)
        name = "decoder.generator.conv_post.weight"
        state[name] = state[name] * 1.01  # a 1% error in the last convolution
        return state

    monkeypatch.setattr(kokoro_upstream.Upstream, "folded_state", corrupted)
    assert main(["parity", "kokoro"]) == 1
    out = capsys.readouterr().out
    assert "OUT of tolerance" in out
    rows = {line.split()[0]: line.split()[-1] for line in out.splitlines()[1:-1]}
    assert rows["bert"] == "yes" and rows["asr"] == "yes"
    assert rows["decoder"] == "NO" and rows["end_to_end"] == "NO"


def test_unknown_family(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parity", "tacotron"]) == 1
    assert "no parity check for 'tacotron'" in capsys.readouterr().err
