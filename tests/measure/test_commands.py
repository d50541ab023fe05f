"""`ggtts eval` and `ggtts bench` end to end on a tiny random Kokoro model: their --json output's shape."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from ggtts.cli import main
from ggtts.errors import GGTTSError
from ggtts.measure import eval as eval_cmd
from ggtts.measure.kokoro import bench, peers


class FakeTranscriber:
    """Hears the same words whatever it is played, so the error counts are known in advance."""

    name = "fake"

    def __init__(self) -> None:
        self.rates: list[int] = []

    def transcribe(self, samples: np.ndarray, sample_rate: int) -> str:
        assert samples.dtype == np.float32 and samples.size > 0
        self.rates.append(sample_rate)
        return "The quick brown fox!"


def test_eval_json(tiny_gguf: Path, tiny_frontend: None, tmp_path: Path, monkeypatch, capsys) -> None:
    fake = FakeTranscriber()
    monkeypatch.setattr(eval_cmd, "load_transcriber", lambda name: fake)
    sentences = tmp_path / "sentences.txt"
    sentences.write_text("# a comment\nThe quick brown fox.\n\nHello there.\n", encoding="utf-8")

    assert main(["eval", str(sentences), "-m", str(tiny_gguf), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)

    assert set(report) == {"model", "voice", "whisper", "sample_rate", "sentences", "overall"}
    assert report["voice"] == "v_one" and report["whisper"] == "fake"
    first, second = report["sentences"]
    assert first["text"] == "The quick brown fox." and first["reference"] == "the quick brown fox"
    assert (first["words"], first["word_errors"], first["wer"]) == (4, 0, 0.0)
    # "hello there" heard as "the quick brown fox": 2 substitutions, 2 insertions
    assert (second["substitutions"], second["deletions"], second["insertions"]) == (2, 0, 2)
    assert second["wer"] == pytest.approx(2.0)
    assert second["audio_s"] > 0 and second["synth_s"] > 0
    overall = report["overall"]
    assert (overall["sentences"], overall["words"], overall["word_errors"]) == (2, 6, 4)
    assert overall["wer"] == pytest.approx(4 / 6)
    assert overall["cer"] > 0 and overall["rtf"] > 0
    assert fake.rates == [report["sample_rate"]] * 2


def test_eval_table(tiny_gguf: Path, tiny_frontend: None, tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(eval_cmd, "load_transcriber", lambda name: FakeTranscriber())
    sentences = tmp_path / "s.txt"
    sentences.write_text("Hello there.\n", encoding="utf-8")
    assert main(["eval", str(sentences), "-m", str(tiny_gguf)]) == 0
    out = capsys.readouterr().out
    assert "heard: The quick brown fox!" in out
    assert "overall: WER 200.00% (4/2 words)" in out


def _no_load(*args: object, **kwargs: object) -> None:
    raise AssertionError("the model was loaded")


@pytest.mark.parametrize(
    ("lines", "error"),
    [
        (
            "今日は3月1日です。\n猫が好きです。\n",
            "sentence 1 ('今日は3月1日です。') is not English (it has '今日は月日です'): ggtts eval scores "
            "English text only",
        ),
        ("Hello world.\n... !!! ...\n", "sentence 2 ('... !!! ...') has no word to score once punctuation is dropped"),
    ],
    ids=["japanese", "punctuation-alone"],
)
def test_eval_refuses_what_it_cannot_score_before_any_work(
    lines: str, error: str, tmp_path: Path, monkeypatch, capsys
) -> None:
    """Japanese would be scored on its digits alone (Whisper told it hears English, the normalizer keeping a-z); a
    sentence of punctuation alone has no word to divide by (its rate was infinite, and --json wrote Infinity, which
    is not JSON). Either is one error naming the sentence, before the model or Whisper loads."""
    import ggtts

    monkeypatch.setattr(ggtts, "load", _no_load)
    monkeypatch.setattr(eval_cmd, "load_transcriber", _no_load)
    sentences = tmp_path / "s.txt"
    sentences.write_text(lines, encoding="utf-8")
    assert main(["eval", str(sentences), "--json"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"ggtts: error: {error}") and len(captured.err.splitlines()) == 1


def test_eval_rejects_an_empty_sentence_file(tmp_path: Path, capsys) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("\n# nothing\n", encoding="utf-8")
    assert main(["eval", str(empty)]) == 1
    assert "no sentences" in capsys.readouterr().err


def _tiny_chunks(text: str, language: str, max_phonemes: int, vocab: object = ()) -> list[str]:
    from tiny_frontend_support import tiny_phonemizer

    return [c[:max_phonemes] for c in tiny_phonemizer(text, language)]


def test_bench_json_and_plot(tiny_gguf: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(bench, "phoneme_chunks", _tiny_chunks)
    png = tmp_path / "bench.png"
    text = "One sentence here. And a second one."
    args = ["bench", "-m", str(tiny_gguf), "--text", text, "--against", "none", "--runs", "2", "--json"]
    assert main([*args, "--plot", str(png)]) == 0
    report = json.loads(capsys.readouterr().out)

    assert report["chunks"] == 2 and report["runs"] == 2 and report["voice"] == "v_one"
    assert list(report["peers"]) == ["ggtts"] and report["ratios"] == {}
    ours = report["peers"]["ggtts"]
    assert len(ours["runs"]) == 2
    for key in ("rtf", "ttfa_s", "total_s", "throughput_x_realtime"):
        spread = ours[key]
        assert 0 < spread["min"] <= spread["median"] <= spread["max"]
    assert ours["ttfa_s"]["median"] <= ours["total_s"]["median"]  # the first of two chunks comes first
    assert ours["audio_s"] > 0 and ours["peak_rss_mib"] > 10
    assert png.stat().st_size > 1000


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("nodir/bench.png", "there is no folder"),
        ("bench.txt", "--plot cannot draw '.txt' images; use one of "),
        ("bench", "--plot needs the image format as the file's suffix ("),
    ],
)
def test_bench_checks_the_plot_path_before_any_work(name: str, error: str, tmp_path: Path, monkeypatch, capsys) -> None:
    """A plot that cannot be written (no such folder, a format matplotlib does not write, no suffix to tell the
    format: matplotlib would write another file, bench.png) is one error before the model is even found."""
    import ggtts.api

    monkeypatch.setattr(ggtts.api, "resolve_model_path", _no_load)
    path = tmp_path / name
    assert main(["bench", "--against", "none", "--runs", "1", "--plot", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"ggtts: error: {path}: ") and error in err and len(err.splitlines()) == 1
    assert "nodir" in name or ".png" in err  # the formats matplotlib writes are named
    assert list(tmp_path.iterdir()) == []


def test_the_onnx_peer_is_left_out_beside_another_model(tiny_gguf: Path, monkeypatch, capsys) -> None:
    """kokoro-onnx runs the default model's int8 ONNX file whatever the model: beside another file it would time
    other weights (or fail on another shape). Among the default peers it is left out, with a note, and the run
    succeeds; named with --against, it was asked for, so that is one error before any timing."""
    monkeypatch.setattr(bench, "phoneme_chunks", _tiny_chunks)
    args = ["bench", "-m", str(tiny_gguf), "--text", "Hello.", "--against", "onnx", "--runs", "1", "--json"]
    assert main(args) == 1
    why = "it runs the default model's int8 ONNX file, not this model's weights"
    assert (
        capsys.readouterr().err
        == f"ggtts: error: --against onnx: kokoro-onnx (onnxruntime, int8) cannot run here: {why}\n"
    )
    monkeypatch.setattr(bench, "DEFAULT_PEERS", "onnx")
    args = ["bench", "-m", str(tiny_gguf), "--text", "Hello.", "--runs", "1", "--json"]
    assert main(args) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert list(report["peers"]) == ["ggtts"] and report["ratios"] == {}
    assert report["left_out"] == {"onnx": why}
    assert f"ggtts bench: kokoro-onnx (onnxruntime, int8) left out: {why}" in captured.err.splitlines()


def test_the_onnx_peer_runs_beside_the_default_model(tiny_gguf: Path, monkeypatch) -> None:
    """The same file as the default model (here: the tiny one standing in for it) is the onnx peer's weights."""
    from ggtts.convert import default_model
    from ggtts.measure.kokoro.peers import left_out

    assert left_out("onnx", tiny_gguf) == "it runs the default model's int8 ONNX file, not this model's weights"
    monkeypatch.setattr(default_model, "default_model_path", lambda: tiny_gguf)
    assert left_out("onnx", tiny_gguf) in (None, f"it needs {peers.REQUIREMENTS['onnx'][1]}")


def test_a_failing_peer_fails_the_command(tiny_gguf: Path, monkeypatch, capsys) -> None:
    """The comparison asked for was not made: the exit status says so, after ggtts's own figures."""
    monkeypatch.setattr(bench, "phoneme_chunks", _tiny_chunks)
    args = ["bench", "-m", str(tiny_gguf), "--text", "Hello.", "--against", "reference", "--runs", "1"]
    assert main(args) == 1
    table = capsys.readouterr().out.splitlines()
    assert table[2].startswith("ggtts (torch) ")
    label, _, failure = table[3].partition("failed: ")
    assert label.strip() == "kokoro KModel (hexgrad, torch)" and "width is fixed" in failure


def test_bench_reports_a_failing_peer_without_stopping(tiny_gguf: Path, monkeypatch) -> None:
    monkeypatch.setattr(bench, "phoneme_chunks", _tiny_chunks)
    # hexgrad's decoder is 1024 wide: it cannot hold the tiny model, and says so
    report = bench.benchmark(tiny_gguf, "Hello.", ["ggtts", "reference"], runs=1, batch=["Hi."], progress=False)
    assert "error" not in report["peers"]["ggtts"]
    assert "width is fixed" in report["peers"]["reference"]["error"]


@pytest.mark.parametrize(
    ("against", "expected"),
    [
        ("onnx,reference", ["ggtts", "onnx", "reference"]),
        ("none", ["ggtts"]),
        ("", ["ggtts"]),
        (" reference , onnx, reference", ["ggtts", "reference", "onnx"]),
    ],
)
def test_parse_peers(against: str, expected: list[str]) -> None:
    assert bench.parse_peers(against) == expected


def test_parse_peers_rejects_unknown_names() -> None:
    with pytest.raises(GGTTSError, match="unknown peer 'espeak'"):
        bench.parse_peers("onnx,espeak")


def test_ratios_divide_ggtts_by_each_peer() -> None:
    def peer(rtf: float, ttfa: float, rss: float, xrt: float) -> dict:
        return {
            "rtf": {"median": rtf},
            "ttfa_s": {"median": ttfa},
            "peak_rss_mib": rss,
            "throughput_x_realtime": {"median": xrt},
        }

    got = bench.ratios(
        {"ggtts": peer(0.2, 1.0, 300, 5.0), "onnx": peer(0.4, 4.0, 600, 2.5), "reference": {"error": "x"}}
    )
    assert got == {"onnx": {"rtf": 0.5, "ttfa": 0.25, "peak_rss": 0.5, "throughput": 2.0}}
