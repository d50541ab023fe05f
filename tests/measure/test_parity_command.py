"""`ggtts parity kokoro`: a table per stage, --json, and a non-zero exit when a stage is out of tolerance."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("kokoro")
pytest.importorskip("transformers")

from ggtts.cli import main
from ggtts.measure.kokoro import upstream as kokoro_upstream
from ggtts.measure.kokoro.parity import TOLERANCES

pytestmark = pytest.mark.needs_reference


def test_parity_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parity", "kokoro", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["family"] == "kokoro" and report["ok"] is True
    assert [s["stage"] for s in report["stages"]] == list(TOLERANCES)
    for s in report["stages"]:
        assert set(s) == {
            "stage", "dtype", "shape", "max_abs_diff", "peak", "relative", "correlation", "std_ratio", "tolerance", "ok"
        }  # fmt: skip
        # the tolerance reported is the one applied, to the ratio reported
        assert (s["dtype"], s["tolerance"]) == TOLERANCES[s["stage"]]
        assert s["relative"] == pytest.approx(s["max_abs_diff"] / s["peak"], rel=1e-12)
        assert s["ok"] and s["relative"] <= s["tolerance"]
        assert s["correlation"] > 0.999 and abs(s["std_ratio"] - 1) < 1e-3
    stages = {s["stage"]: s for s in report["stages"]}
    assert stages["durations"]["max_abs_diff"] == 0  # durations are integers and must agree exactly
    assert stages["end_to_end"]["dtype"] == "float64"


def _rows(out: str) -> dict[str, list[str]]:
    return {line.split()[0]: line.split() for line in out.splitlines() if line.split()[:1] in ([s] for s in TOLERANCES)}


def test_parity_table_prints_the_tolerance_it_applies(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parity", "kokoro"]) == 0
    out = capsys.readouterr().out
    rows = _rows(out)
    assert list(rows) == list(TOLERANCES)
    for stage, cells in rows.items():
        assert float(cells[-2]) == TOLERANCES[stage][1] and cells[1] == TOLERANCES[stage][0]
        assert float(cells[5]) <= float(cells[-2]) and cells[-1] == "yes"
    assert "tolerance is on max |ours - upstream| / max |upstream|" in out


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
    rows = {stage: cells[-1] for stage, cells in _rows(out).items()}
    assert rows["bert"] == "yes" and rows["asr"] == "yes" and rows["source"] == "yes"
    assert rows["decoder"] == "NO" and rows["end_to_end"] == "NO"


def test_unknown_family(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parity", "tacotron"]) == 1
    assert "no parity check for 'tacotron'" in capsys.readouterr().err
