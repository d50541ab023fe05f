"""Hostile input to the CLI: text that is not UTF-8 (standard input) or not Unicode (argv's undecodable bytes),
outputs that cannot be written, seeds out of range. Each is one line on standard error, exit status 1, before the
model loads (so before any synthesis), and nothing already on disk is touched. A write that fails late anyway is
one line too.

No weights: ``ggtts.load`` is replaced by a stand-in that records the call and, where a test gets that far, hands
back a model that makes a short silence.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import ggtts
from ggtts.audio import Audio
from ggtts.cli import main
from ggtts.errors import InputError
from ggtts.families.base import MAX_SEED, check_text, check_unicode
from ggtts.fsutil import OutputError, check_writable

SAMPLE_RATE = 16000
MISSING_MODEL = "no-such-model.gguf"  # loading it fails: an error naming it means the check came too late


class SilentModel:
    """What ``ggtts.load`` hands back here: records each call, ``during`` runs inside synthesis."""

    sample_rate = SAMPLE_RATE

    def __init__(self, during: Callable[[], None] | None = None) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.during = during

    def synthesize(self, text: str, voice: str | None = None, speed: float = 1.0, **options: Any) -> Audio:
        self.calls.append((text, options))
        if self.during is not None:
            self.during()
        return Audio(np.zeros(SAMPLE_RATE // 10, dtype=np.float32), SAMPLE_RATE)

    def stream(self, text: str, voice: str | None = None, speed: float = 1.0, **options: Any) -> Iterator[Audio]:
        yield self.synthesize(text, voice, speed, **options)


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[SilentModel]:
    """The models ``ggtts.load`` handed out; a bad-input test asserts it stays empty."""
    handed: list[SilentModel] = []

    def load(path: str | None = None, **kwargs: Any) -> SilentModel:
        handed.append(SilentModel())
        return handed[-1]

    monkeypatch.setattr(ggtts, "load", load)
    return handed


def _snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` -> its bytes (``None`` for a directory)."""
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes() for p in sorted(root.rglob("*"))}


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "internal error" not in err[0]
    return err[0]


# ---- text ------------------------------------------------------------------------------------------------------
def _stdin(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data), encoding="utf-8"))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\xff\xfe", "byte 0xff at byte offset 0"),
        ("d\u00e9j\u00e0 ".encode() + b"\xc3", "byte 0xc3 at byte offset 7"),  # a cut-off sequence at the end
        (b"ok \xed\xa0\x80 ok", "byte 0xed at byte offset 3"),  # UTF-8 of a surrogate is not UTF-8
    ],
)
def test_stdin_that_is_not_utf8_is_one_line_naming_the_offset(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    loads: list[SilentModel],
    data: bytes,
    message: str,
) -> None:
    _stdin(monkeypatch, data)
    assert main(["speak", "-o", str(tmp_path / "x.wav")]) == 1
    line = _one_line(capsys)
    assert "standard input: not UTF-8 text" in line and message in line, line
    assert loads == [] and list(tmp_path.iterdir()) == []


def test_stdin_is_decoded_as_utf8_whatever_the_locale(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, loads: list[SilentModel]
) -> None:
    text = "d\u00e9j\u00e0 vu \u2014 \u65e5\u672c"
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode()), encoding="latin-1"))
    assert main(["speak", "-o", str(tmp_path / "x.wav")]) == 0
    assert loads[0].calls[0][0] == text


def test_argv_text_with_lone_surrogates_is_one_line_before_loading(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], loads: list[SilentModel]
) -> None:
    assert main(["speak", "ab\udcff", "-o", str(tmp_path / "x.wav")]) == 1  # what argv's b"ab\xff" decodes to
    line = _one_line(capsys)
    assert "not valid Unicode text" in line and "U+DCFF" in line and "character offset 2" in line, line
    assert "invalid UTF-8 in the input?" in line
    assert loads == [] and list(tmp_path.iterdir()) == []


def test_real_argv_bytes_that_are_not_utf8(tmp_path: Path) -> None:
    """The real thing: a process given the byte 0xff as its text argument (and a model that does not exist, so an
    error about the model would show the text was checked too late)."""
    out = tmp_path / "x.wav"
    argv: list[str | bytes] = [sys.executable, "-m", "ggtts.cli", "speak", b"\xff", "-o", str(out), "-m", MISSING_MODEL]
    env = {**os.environ, "PYTHONUTF8": "1"}
    r = subprocess.run(argv, capture_output=True, timeout=120, env=env, cwd=tmp_path)
    err = r.stderr.decode("utf-8", "replace").strip().splitlines()
    assert r.returncode == 1 and len(err) == 1, err
    assert "not valid Unicode text" in err[0] and "U+DCFF" in err[0], err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("text", ["\ud800", "ok \udfff", "a\udc80b", "\ud83d"])
def test_check_text_refuses_lone_surrogates(text: str) -> None:
    with pytest.raises(InputError, match=r"not valid Unicode text: it holds U\+D[89A-F][0-9A-F]{2}"):
        check_text(text, 100)
    with pytest.raises(InputError, match="invalid UTF-8 in the input"):
        check_unicode(text)


@pytest.mark.parametrize("text", ["plain", "\U0001f600 emoji", "\ufffd replacement", "\ud7ff\ue000 edges"])
def test_check_text_takes_any_real_unicode(text: str) -> None:
    assert check_text(text, 100) == text


# ---- output ----------------------------------------------------------------------------------------------------
@pytest.fixture
def unwritable_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory nobody here can make a file in: a chmod 0o555 one, or, for root (whom permission bits do not
    stop), ``/sys``, where even root cannot."""
    if os.geteuid() == 0:
        yield Path("/sys")
        return
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        yield locked
    finally:
        locked.chmod(0o755)


def _targets(tmp_path: Path, unwritable: Path) -> dict[str, tuple[Path, str]]:
    """Case -> (output path, what the one line must say)."""
    (tmp_path / "x.wav").mkdir()
    (tmp_path / "x.wav" / "inside.txt").write_text("keep me")
    (tmp_path / "plain").write_text("a file, not a folder")
    return {
        "directory": (tmp_path / "x.wav", "it is a directory"),
        "parent is a file": (tmp_path / "plain" / "x.wav", "plain is not a directory"),
        "grandparent is a file": (tmp_path / "plain" / "sub" / "x.wav", "plain is not a directory"),
        "missing folder": (tmp_path / "new" / "deeper" / "x.wav", f"there is no folder {tmp_path}/new/deeper"),
        "unwritable folder": (unwritable / "x.wav", f"cannot create a file in {unwritable}"),
        "/sys": (Path("/sys/x.wav"), "cannot create a file in /sys"),
        "/proc": (Path("/proc/x.wav"), "cannot create a file in /proc"),
        "name too long": (tmp_path / ("x" * 300 + ".wav"), "File name too long"),
    }


CASES = [
    "directory",
    "parent is a file",
    "grandparent is a file",
    "missing folder",
    "unwritable folder",
    "/sys",
    "/proc",
    "name too long",
]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("command", ["speak", "decode", "convert"])
def test_an_output_that_cannot_be_written_fails_first(
    tmp_path: Path,
    unwritable_dir: Path,
    capsys: pytest.CaptureFixture[str],
    loads: list[SilentModel],
    case: str,
    command: str,
) -> None:
    target, reason = _targets(tmp_path, unwritable_dir)[case]
    if command == "convert":
        target = target.with_suffix(".gguf") if target.suffix == ".wav" and case != "directory" else target
    before = _snapshot(tmp_path)
    # every other argument is bad too (a model, vocoder or checkpoint that does not exist): the output is checked
    # first, so only it is named
    argv = {
        "speak": ["speak", "hello", "-m", MISSING_MODEL, "-o", str(target)],
        "decode": ["decode", "1 2 3", "--vocoder", MISSING_MODEL, "-o", str(target)],
        "convert": ["convert", "kokoro", str(tmp_path / "missing.pth"), "-o", str(target)],
    }[command]
    assert main(argv) == 1
    line = _one_line(capsys)
    assert f"{target}: cannot write the output" in line and reason in line, line
    assert MISSING_MODEL not in line and "missing.pth" not in line
    assert loads == []
    assert _snapshot(tmp_path) == before


def test_check_writable_leaves_nothing_and_makes_no_folder(tmp_path: Path) -> None:
    check_writable(tmp_path / "x.wav")
    with pytest.raises(OutputError, match=r"there is no folder .*new/deeper \(make it first\)"):
        check_writable(tmp_path / "new" / "deeper" / "x.wav")
    check_writable(tmp_path / "new" / "deeper" / "x.wav", new_folders=True)  # a folder the caller makes
    assert list(tmp_path.iterdir()) == []


def test_stdout_is_not_checked_as_a_file(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsysbinary: pytest.CaptureFixture[bytes],
    loads: list[SilentModel],
) -> None:
    (tmp_path / "-").mkdir()  # were "-" taken for a file name, this directory would make it fail
    monkeypatch.chdir(tmp_path)
    assert main(["speak", "hello", "-o", "-"]) == 0
    assert capsysbinary.readouterr().out[:4] == b"RIFF"


def test_a_write_that_fails_after_synthesis_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The check passed, then the folder turned into a file while the model worked (a full disk, a mount gone
    read-only, fail the same way): still one line naming the output."""
    folder = tmp_path / "sub"
    folder.mkdir()

    def folder_becomes_a_file() -> None:
        folder.rmdir()
        folder.write_text("not a folder any more")

    model = SilentModel(during=folder_becomes_a_file)
    monkeypatch.setattr(ggtts, "load", lambda *a, **k: model)
    target = folder / "out.wav"
    assert main(["speak", "hello", "-o", str(target)]) == 1
    line = _one_line(capsys)
    assert f"{target}: cannot write the output" in line, line
    assert model.calls and folder.read_text() == "not a folder any more"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sub"]


FULL_STDOUT = """
import sys
import numpy as np
import ggtts
from ggtts.audio import Audio

class Quiet:
    sample_rate = 24000
    def stream(self, text, **options):
        yield Audio(np.zeros(24000, np.float32), 24000)

ggtts.load = lambda *args, **kwargs: Quiet()
from ggtts.cli import main
sys.exit(main(["speak", "hello", "-o", "-"]))
"""


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux's /dev/full (a device that is always full)")
def test_standard_output_on_a_full_disk_is_one_line() -> None:
    with open("/dev/full", "wb") as full:
        run = subprocess.run([sys.executable, "-c", FULL_STDOUT], stdout=full, stderr=subprocess.PIPE, text=True,
                             timeout=300)  # fmt: skip
    assert run.returncode == 1
    assert run.stderr.strip() == "ggtts: error: standard output: cannot write the audio (No space left on device)"


def test_a_models_own_os_error_while_streaming_is_not_called_an_output_error(
    monkeypatch: pytest.MonkeyPatch, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    class Failing:
        sample_rate = SAMPLE_RATE

        def stream(self, text: str, **options: Any) -> Iterator[Audio]:
            yield Audio(np.zeros(100, np.float32), SAMPLE_RATE)
            raise FileNotFoundError(2, "No such file or directory", "/nonexistent/dictionary.txt")

    monkeypatch.setattr(ggtts, "load", lambda *a, **k: Failing())
    assert main(["speak", "hello", "-o", "-"]) == 1
    captured = capsysbinary.readouterr()
    assert captured.out[:4] == b"RIFF" and b"standard output" not in captured.err
    assert b"dictionary.txt" in captured.err


def test_save_failure_is_an_output_error_and_still_an_oserror(tmp_path: Path) -> None:
    (tmp_path / "plain").write_text("a file")
    with pytest.raises(OutputError, match=re.escape("plain/x.wav: cannot write the output")) as caught:
        Audio(np.zeros(10, dtype=np.float32), SAMPLE_RATE).save(tmp_path / "plain" / "x.wav")
    assert isinstance(caught.value, OSError)


@pytest.mark.parametrize("case", CASES)
def test_save_refuses_what_speak_refuses(tmp_path: Path, unwritable_dir: Path, case: str) -> None:
    """Audio.save refuses an output as ``ggtts speak -o`` does, in the same words: a missing folder is one error
    that names it, not a folder made. Nothing is written."""
    target, reason = _targets(tmp_path, unwritable_dir)[case]
    before = _snapshot(tmp_path)
    with pytest.raises(OutputError) as caught:
        Audio(np.zeros(10, dtype=np.float32), SAMPLE_RATE).save(target)
    message = str(caught.value)
    assert f"{target}: cannot write the output" in message and reason in message, message
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("rate", [16000, 22050, 24000])
def test_an_opus_file_at_any_model_rate(tmp_path: Path, rate: int) -> None:
    """Opus encodes 8, 12, 16, 24 and 48 kHz: a 22,050 Hz voice's audio (Piper's, Magpie's) is resampled to 48 kHz
    (as opusenc does), the others kept at their own rate."""
    import soundfile as sf

    tone = (0.5 * np.sin(np.arange(rate) * (2 * np.pi * 440 / rate))).astype(np.float32)
    Audio(tone, rate).save(tmp_path / "x.opus")
    samples, got = sf.read(tmp_path / "x.opus", dtype="float32")
    assert got == (48000 if rate == 22050 else rate)
    assert abs(len(samples) - got) < 0.1 * got and float(np.sqrt(np.mean(np.square(samples)))) > 0.3


# ---- voice -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("voice", ["nobody", "jf_alpha,nobody", "jf_alpha:0.5,nobody:0.5"])
def test_an_unknown_voice_is_one_line_before_loading(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], loads: list[SilentModel], voice: str
) -> None:
    """The default model's voices come from its file's metadata: a voice it lacks costs no load."""
    assert main(["speak", "hello", "-v", voice, "-o", str(tmp_path / "x.wav")]) == 1
    line = _one_line(capsys)
    assert "unknown voice 'nobody'; choose one of jf_alpha," in line, line
    assert loads == [] and list(tmp_path.iterdir()) == []


def test_a_known_voice_and_a_blend_reach_the_model(tmp_path: Path, loads: list[SilentModel]) -> None:
    for voice in ("jm_kumo", "jf_alpha:0.7,jm_kumo:0.3"):
        assert main(["speak", "hello", "-v", voice, "-o", str(tmp_path / "x.wav")]) == 0
    assert len(loads) == 2


# ---- seed ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [str(2**70), str(MAX_SEED + 1), "-1"])
def test_a_seed_out_of_range_is_one_line_before_loading(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], loads: list[SilentModel], seed: str
) -> None:
    assert main(["speak", "hello", "--seed", seed, "-o", str(tmp_path / "x.wav")]) == 1
    line = _one_line(capsys)
    assert f"seed must be between 0 and {MAX_SEED}, got {seed}" in line, line
    assert loads == [] and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("seed", [0, 7, MAX_SEED])
def test_a_seed_in_range_reaches_the_model(tmp_path: Path, loads: list[SilentModel], seed: int) -> None:
    assert main(["speak", "hello", "--seed", str(seed), "-o", str(tmp_path / "x.wav")]) == 0
    assert loads[0].calls[0][1]["seed"] == seed


# ---- lexicon ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("content", "message"),
    [(None, "no such lexicon file"), ("ggtts gee\n", "words.txt:1: an entry is 'written = said'")],
)
def test_a_lexicon_that_cannot_be_read_is_one_line_before_loading(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], loads: list[SilentModel], content: str | None, message: str
) -> None:
    lexicon = tmp_path / "words.txt"
    if content is not None:
        lexicon.write_text(content, encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()
    assert main(["speak", "hello", "--lexicon", str(lexicon), "-o", str(out / "x.wav")]) == 1
    line = _one_line(capsys)
    assert message in line, line
    assert loads == [] and list(out.iterdir()) == []


def test_a_lexicon_is_a_load_option_of_every_model(tmp_path: Path) -> None:
    """``ggtts.load(..., lexicon=)``: a file or a dict, refused (before any weight is read) where it is neither."""
    from ggtts.errors import InputError
    from ggtts.text.lexicon import Lexicon

    with pytest.raises(InputError, match="no such lexicon file"):
        ggtts.load("kokoro", lexicon=tmp_path / "missing.txt")
    with pytest.raises(InputError, match="lexicon must be a file's path or a mapping"):
        ggtts.load("kokoro", lexicon=["ggtts"])
    model = ggtts.load("kokoro", lexicon={"ggtts": "banana"})
    assert model.lexicon == Lexicon.of({"ggtts": "banana"}) and model.said("I use GGTTS.") == "I use banana."
