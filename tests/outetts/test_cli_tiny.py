"""The OuteTTS pipeline from the command line, as a user runs it: convert, speak, decode, info."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import soundfile as sf

sys.path.insert(0, str(Path(__file__).parent))
from _tiny_outetts import build_qwen2_checkpoint, build_wavtokenizer_ckpt

HOP = 320
TINY_SPEAKER = Path(__file__).parent / "data" / "tiny_speaker.json"


def ggtts(*args: str | Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("ggtts") or pytest.skip("the ggtts command is not installed")
    return subprocess.run([exe, *map(str, args)], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("oute-cli")
    hf = build_qwen2_checkpoint(d / "hf")
    ckpt = build_wavtokenizer_ckpt(d / "w.ckpt")
    lm, voc = d / "lm.gguf", d / "voc.gguf"
    r = ggtts("convert", "outetts", hf, "-o", lm, "--type", "q8_0")
    assert r.returncode == 0, r.stderr
    r = ggtts("convert", "wavtokenizer", ckpt, "-o", voc, "--type", "f16")
    assert r.returncode == 0, r.stderr
    return lm, voc


def test_info_shows_llama_cpp_architectures(models: tuple[Path, Path]) -> None:
    lm, voc = models
    out = ggtts("info", lm).stdout
    assert "architecture: qwen2" in out and "Q8_0" in out and "tokenizer.ggml.model = 'gpt2'" in out
    assert "architecture: wavtokenizer-dec" in ggtts("info", voc).stdout


def test_speak_with_vocoder(models: tuple[Path, Path], tmp_path: Path) -> None:
    lm, voc = models
    out = tmp_path / "hello.wav"
    r = ggtts("speak", "-m", lm, "--vocoder", voc, "--speaker", TINY_SPEAKER, "--seed", "3", "Hello world", "-o", out)
    assert r.returncode == 0, r.stderr
    audio, rate = sf.read(out)
    assert rate == 24000 and len(audio) > 0 and len(audio) % HOP == 0


def test_voices_lists_the_built_in_voice_and_speaker_files_add_theirs(
    models: tuple[Path, Path], tmp_path: Path
) -> None:
    lm, voc = models
    listed = ggtts("voices", "-m", lm)
    assert listed.returncode == 0 and listed.stdout.split()[0] == "en_male_1"
    assert "files given at load add more" in listed.stderr
    out = tmp_path / "v.wav"
    r = ggtts("speak", "-m", lm, "--vocoder", voc, "--speaker", TINY_SPEAKER, "-v", "tiny_speaker", "Hi", "-o", out)
    assert r.returncode == 0, r.stderr  # a voice of a speaker file is not refused before the load
    r = ggtts("speak", "-m", lm, "--vocoder", voc, "-v", "nobody", "Hi", "-o", out)
    assert r.returncode == 1 and "unknown voice 'nobody'; choose one of en_male_1" in r.stderr


def test_decode_codes(models: tuple[Path, Path], tmp_path: Path) -> None:
    _, voc = models
    out = tmp_path / "codes.wav"
    r = ggtts("decode", "--vocoder", voc, "<|1|><|2|><|3|><|4|><|5|>", "-o", out)
    assert r.returncode == 0, r.stderr
    audio, rate = sf.read(out)
    assert rate == 24000 and len(audio) == 5 * HOP
    bad = ggtts("decode", "--vocoder", voc, "1 2 999999", "-o", tmp_path / "bad.wav")
    assert bad.returncode != 0 and "out of range" in bad.stderr and "Traceback" not in bad.stderr
    assert not (tmp_path / "bad.wav").exists()


def test_decode_unreadable_codes_file_is_one_line(models: tuple[Path, Path], tmp_path: Path) -> None:
    _, voc = models
    codes = tmp_path / "codes.txt"
    codes.write_bytes(b"\xff\xfe 1 2 3 \x80")
    r = ggtts("decode", "--vocoder", voc, codes, "-o", tmp_path / "out.wav")
    assert r.returncode != 0 and "Traceback" not in r.stderr and "internal error" not in r.stderr
    assert str(codes) in r.stderr and "UTF-8" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out.wav").exists()


def test_decode_a_mistyped_codes_file_is_named(models: tuple[Path, Path], tmp_path: Path) -> None:
    """A codes argument that reads as a file's name, with no such file, is that, not a bad code; and a file that
    holds no decoder (the language model) is refused naming the decoders' files only."""
    lm, voc = models
    r = ggtts("decode", "--vocoder", voc, tmp_path / "codez.txt", "-o", tmp_path / "out.wav")
    assert r.returncode != 0 and f"{tmp_path / 'codez.txt'}: no such file" in r.stderr
    assert "not an audio code" not in r.stderr and not (tmp_path / "out.wav").exists()
    r = ggtts("decode", "--vocoder", lm, "1 2 3", "-o", tmp_path / "out.wav")
    assert r.returncode != 0 and "(decoders: qwen3omni-talker, wavtokenizer-dec)" in r.stderr


def test_decode_bad_suffix_fails_before_decoding(models: tuple[Path, Path], tmp_path: Path) -> None:
    _, voc = models
    out = tmp_path / "out.txt"
    # the codes are bad too: the suffix is checked first, so its error is the one reported
    r = ggtts("decode", "--vocoder", voc, "1 2 999999", "-o", out)
    assert r.returncode != 0 and "unsupported audio format '.txt'" in r.stderr
    assert "out of range" not in r.stderr and not out.exists()


def test_decode_from_a_terminal_does_not_wait(models: tuple[Path, Path], tmp_path: Path) -> None:
    import os
    import pty

    _, voc = models
    exe = shutil.which("ggtts") or pytest.skip("the ggtts command is not installed")
    primary, secondary = pty.openpty()
    try:
        r = subprocess.run(
            [exe, "decode", "--vocoder", str(voc), "-o", str(tmp_path / "out.wav")],
            stdin=secondary,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        os.close(primary)
        os.close(secondary)
    assert r.returncode != 0 and "no codes given" in r.stderr


def test_speak_rejects_phonemes_for_outetts(models: tuple[Path, Path], tmp_path: Path) -> None:
    lm, voc = models
    out = tmp_path / "x.wav"
    r = ggtts("speak", "-m", lm, "--vocoder", voc, "--speaker", TINY_SPEAKER, "--phonemes", "hello", "-o", out)
    assert r.returncode != 0 and "not phonemes" in r.stderr and not out.exists()


def test_convert_low_bit_types_for_the_language_model_only(models: tuple[Path, Path], tmp_path: Path) -> None:
    from ggtts.gguf import GGUFFile

    hf = models[0].parent / "hf"
    out = tmp_path / "lm-q4_0.gguf"
    r = ggtts("convert", "outetts", hf, "-o", out, "--type", "q4_0")
    assert r.returncode == 0, r.stderr
    g = GGUFFile(out)
    assert g.info("blk.0.ffn_up.weight").type.name == "Q4_0"
    assert g.info("blk.0.attn_norm.weight").type.name == "F32"  # norms and biases stay float
    assert g.get("general.file_type") == 2  # llama.cpp's MOSTLY_Q4_0
    assert g.get("tokenizer.ggml.merges"), "llama.cpp refuses a gpt2 vocabulary without merges"
    r = ggtts("convert", "wavtokenizer", hf.parent / "w.ckpt", "-o", tmp_path / "voc.gguf", "--type", "q4_0")
    assert r.returncode != 0 and "not offered for the WavTokenizer decoder" in r.stderr
    assert not (tmp_path / "voc.gguf").exists()
    r = ggtts("convert", "kokoro", tmp_path / "k.onnx", "-o", tmp_path / "k.gguf", "--type", "q4_1")
    assert r.returncode != 0 and "not offered for Kokoro" in r.stderr


def test_batch_loads_the_vocoder_and_speaker_it_is_given(models: tuple[Path, Path], tmp_path: Path) -> None:
    """Companion files are chosen at load: ``ggtts batch --vocoder`` hands them to the loader, as speak does."""
    lm, voc = models
    alone = tmp_path / "m" / "lm.gguf"  # no vocoder beside it: only --vocoder gives one
    alone.parent.mkdir()
    shutil.copy(lm, alone)
    lines = tmp_path / "lines.txt"
    lines.write_text("Hello world\nSecond line\n")
    out = tmp_path / "out"
    r = ggtts("batch", lines, "--out", out, "--split", "line", "-m", alone, "--vocoder", voc, "--speaker",
              TINY_SPEAKER, "--seed", "3", "--no-progress")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert len(list(out.glob("*.wav"))) == 2


@pytest.mark.parametrize("fault", ["GGTTS_TEST_DIE_ON_ITEM", "GGTTS_TEST_RAISE_ON_ITEM"])
def test_a_parallel_batch_worker_that_dies_hands_back_every_item_it_held(
    models: tuple[Path, Path], tmp_path: Path, fault: str
) -> None:
    """``ggtts batch --workers 2 --parallel 2``: each worker process speaks two items at once (its model's lanes).
    Item 0002 kills every worker that starts it (fault injection): the item held beside it is tried again alone and
    spoken, 0002 alone fails after MAX_ATTEMPTS deaths of its own, and every other item ends with exactly one done
    record and one file. Or (``RAISE``, once) the item's thread raises what the item's own error handling lets
    through: the worker ends itself rather than wait for ever for a record that never comes, and both items it
    held are spoken again."""
    import json
    import os
    from collections import Counter

    from ggtts.batch.local import MAX_ATTEMPTS

    lm, voc = models
    lines = tmp_path / "lines.txt"
    lines.write_text("".join(f"Line number {n} here\n" for n in range(1, 7)))
    out = tmp_path / "out"
    faults = Path(__file__).parent.parent / "batch" / "fault_injection"  # see its sitecustomize.py
    exe = shutil.which("ggtts") or pytest.skip("the ggtts command is not installed")
    once = fault == "GGTTS_TEST_RAISE_ON_ITEM"
    env = {**os.environ, "PYTHONPATH": str(faults), fault: "0002"}
    if once:
        env["GGTTS_TEST_DIE_ONCE"] = str(tmp_path / "raised.pid")
    r = subprocess.run(
        [exe, "batch", lines, "--out", out, "--split", "line", "-m", lm, "--vocoder", voc, "--speaker", TINY_SPEAKER,
         "--seed", "3", "--workers", "2", "--threads", "1", "--parallel", "2", "--no-progress"],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert r.returncode == (0 if once else 1), r.stderr  # (1: some items failed)
    records = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
    assert Counter(r["id"] for r in records) == Counter(f"{n:04d}" for n in range(1, 7))
    status = {r["id"]: r["status"] for r in records}
    assert status == {f"{n:04d}": "failed" if n == 2 and not once else "done" for n in range(1, 7)}
    if once:
        assert (tmp_path / "raised.pid").exists(), "the fault was not injected"
    else:
        failed = next(r for r in records if r["id"] == "0002")
        assert f"died while speaking this item ({MAX_ATTEMPTS} times)" in failed["error"]
    spoken = [f"{n:04d}.wav" for n in range(1, 7) if once or n != 2]
    assert sorted(p.name for p in out.glob("*.wav")) == spoken


def test_a_parallel_ray_actor_speaks_items_together_and_one_that_dies_hands_each_back(
    models: tuple[Path, Path], tmp_path: Path
) -> None:
    """``ggtts batch --ray local --workers 1 --parallel 2``: the actor speaks two items at once (a threaded actor, its
    model's lanes). Item 0002 kills every actor process that starts it (fault injection): the items in flight beside
    it are tried again alone and spoken, 0002 alone fails after MAX_ATTEMPTS deaths of its own; and item 0005, held
    in the actor while it speaks, does not hold back the item after it: every other item is recorded before 0005 is
    let go. Every item but 0002 ends with exactly one done record and one file."""
    import json
    import os
    from collections import Counter

    pytest.importorskip("ray")
    from ggtts.batch.local import MAX_ATTEMPTS
    from time_limit import wait_for

    lm, voc = models
    lines = tmp_path / "lines.txt"
    lines.write_text("".join(f"Line number {n} here\n" for n in range(1, 7)))
    out = tmp_path / "out"
    faults = Path(__file__).parent.parent / "batch" / "fault_injection"  # see its sitecustomize.py
    pause = tmp_path / "pause"
    pause.mkdir()
    exe = shutil.which("ggtts") or pytest.skip("the ggtts command is not installed")
    env = {**os.environ, "PYTHONPATH": str(faults), "GGTTS_TEST_DIE_ON_ITEM": "0002",
           "GGTTS_TEST_PAUSE_ON_ITEM": "0005", "GGTTS_TEST_PAUSE_DIR": str(pause)}  # fmt: skip
    process = subprocess.Popen(
        [exe, "batch", lines, "--out", out, "--split", "line", "-m", lm, "--vocoder", voc, "--speaker", TINY_SPEAKER,
         "--seed", "3", "--ray", "local", "--workers", "1", "--threads", "1", "--parallel", "2", "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip

    def recorded() -> set[str]:
        manifest = out / "manifest.jsonl"
        text = manifest.read_text() if manifest.exists() else ""
        return {json.loads(line)["id"] for line in text.splitlines() if line.endswith("}")}

    try:
        # one actor, 0005 held in it: 0006, given after it, is spoken only beside it
        others = {f"{n:04d}" for n in range(1, 7)} - {"0005"}
        wait_for(lambda: recorded() >= others, "the items other than the held one", process=process)
        assert "0005" not in recorded() and (pause / "reached").exists()
        (pause / "release").write_text("")
        _, stderr = process.communicate(timeout=600)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 1, stderr  # (1: some items failed)
    records = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
    assert Counter(r["id"] for r in records) == Counter(f"{n:04d}" for n in range(1, 7))
    status = {r["id"]: r["status"] for r in records}
    assert status == {f"{n:04d}": "failed" if n == 2 else "done" for n in range(1, 7)}, records
    failed = next(r for r in records if r["id"] == "0002")
    assert f"died while speaking this item ({MAX_ATTEMPTS} times)" in failed["error"]
    assert sorted(p.name for p in out.glob("*.wav")) == [f"{n:04d}.wav" for n in range(1, 7) if n != 2]
