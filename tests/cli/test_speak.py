"""`ggtts speak` with the real default model: text sources, output targets, and bad input."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import soundfile as sf

import ggtts
from ggtts.cli import main

pytestmark = pytest.mark.needs_weights


def _speak(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[bytes]:
    exe = shutil.which("ggtts") or pytest.skip("the ggtts command is not installed")
    return subprocess.run(
        [exe, "speak", *args], input=None if stdin is None else stdin.encode(), capture_output=True, timeout=300
    )


def test_speak_argument_to_wav(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "a.wav"
    assert main(["speak", "Good morning.", "-o", str(out), "-v", "jm_kumo", "-s", "1.2"]) == 0
    info = sf.info(out)
    assert info.samplerate == 24000 and info.subtype == "PCM_16" and info.duration > 0.3
    assert f"wrote {out}" in capsys.readouterr().err


def test_speak_file_and_stdin_to_stdout_stream(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = tmp_path / "t.txt"
    text.write_text("Reading from a file.", encoding="utf-8")
    out = tmp_path / "f.flac"
    assert main(["speak", "-f", str(text), "-o", str(out)]) == 0, capsys.readouterr().err
    assert sf.info(out).format == "FLAC"
    # the real command, for a real standard input and a real pipe on standard output
    r = _speak("-o", "-", stdin="Reading from standard input.")
    assert r.returncode == 0, r.stderr
    assert r.stdout[:4] == b"RIFF"
    audio, rate = sf.read(io.BytesIO(r.stdout), dtype="float32")
    assert rate == 24000 and len(audio) > 24000 // 2


BAD = [
    (["   "], "the text is empty"),
    (["...?! — ''"], "the text has nothing to say"),
    (["hello", "-v", "nobody"], "unknown voice 'nobody'; choose one of jf_alpha"),
    (["hello", "-v", "jf_alpha:x"], "voice weight 'x' of 'jf_alpha' is not a number"),
    (["x" * 100_001], "the limit is 100000"),
    (["hello", "-o", "out.xyz"], "unsupported audio format '.xyz'"),
    (["hello", "-f", "missing.txt"], "give the text either as an argument or with -f, not both"),
    (["-f", "missing.txt"], "missing.txt: cannot read text (No such file or directory)"),
    (["hello", "--float", "-o", "-"], "--float needs a file"),
]


@pytest.mark.parametrize(("args", "message"), BAD, ids=[m for _, m in BAD])
def test_bad_input_is_one_line_and_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    if "-o" not in args:
        args = [*args, "-o", "out.wav"]
    assert main(["speak", *args]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err
    assert [p.name for p in tmp_path.iterdir()] == []


def test_stdout_stream_writes_nothing_on_bad_input() -> None:
    r = _speak("hello", "-v", "nobody", "-o", "-")
    assert r.returncode != 0 and r.stdout == b""
    assert b"unknown voice 'nobody'" in r.stderr


def test_speed_out_of_range_is_rejected() -> None:
    r = _speak("hello", "-s", "5")
    assert r.returncode == 2 and b"5.0 is out of range; use 0.25 to 4.0" in r.stderr
    assert r.stderr.count(b"\n") == 1 and b"(see ggtts speak --help)" in r.stderr  # one line, not the usage block


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["speak", " ", "-o", "x.wav"], "the text is empty"),
        (["speak", "Hi.", "--guidance", "-o", "x.wav"], "unknown option 'guidance' for kokoro"),  # Magpie's flag
        (["speak", "Hi.", "--mode", "chat", "-o", "x.wav"], "unknown option 'mode' for kokoro"),  # Qwen3-Omni's
    ],
)
def test_text_and_option_errors_come_before_the_model_loads(
    argv: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import ggtts
    from ggtts.errors import GGTTSError

    def no_load(*_args: object, **_kwargs: object) -> None:
        raise GGTTSError("the model was loaded")

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(ggtts, "load", no_load)
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert message in err and "the model was loaded" not in err and err.count("\n") == 1


def test_voices_of_the_default_model(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["voices"]) == 0
    out, err = capsys.readouterr()
    rows = [line.split() for line in out.splitlines()]
    assert ["jf_alpha", "Japanese", "female"] in rows and ["jm_kumo", "Japanese", "male"] in rows
    assert len(rows) == 5 and "5 voices of" in err and "blend" in err
    from ggtts.text.japanese import japanese_installed

    model = ggtts.load()  # the languages a Wyoming client picks voices by: the voices' own, then the file's English
    expected = ["ja", "en_US"] if japanese_installed() else ["en_US"]  # Japanese text read where the extra is
    assert {v: model.voice_languages(v) for v in model.voices} == {v: expected for v in model.voices}


def test_info_of_the_built_in_name(capsys: pytest.CaptureFixture[str]) -> None:
    from ggtts.convert.default_model import ensure_default_model

    assert main(["info", "kokoro"]) == 0
    out = capsys.readouterr().out
    assert f"file: {ensure_default_model()}\n" in out and "family: kokoro (" in out


def test_nothing_to_say_leaves_an_existing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "keep.wav"
    out.write_bytes(b"the audio that was here")
    assert main(["speak", "!!! ... ???", "-o", str(out)]) == 1
    assert "nothing to say" in capsys.readouterr().err
    assert out.read_bytes() == b"the audio that was here"
    assert [p.name for p in tmp_path.iterdir()] == ["keep.wav"]


def test_precision_reaches_the_loader(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ggtts
    from ggtts.errors import GGTTSError
    from ggtts.runtime.device import resolve_device

    asked: list[dict[str, object]] = []

    def load(model: object, **options: object) -> None:
        asked.append(options)
        raise GGTTSError("stop here")

    monkeypatch.setattr(ggtts, "load", load)
    assert main(["speak", "Hi.", "-o", str(tmp_path / "a.wav"), "--precision", "bfloat16"]) == 1
    assert main(["speak", "Hi.", "-o", str(tmp_path / "a.wav")]) == 1
    assert main(["speak", "Hi.", "-o", str(tmp_path / "a.wav"), "--precision", "float32"]) == 1
    device = resolve_device("auto")  # said once, then passed: cpu here
    # float32 or nothing: the model's own, asked of no loader
    assert asked == [{"precision": "bfloat16", "device": device}, {"device": device}, {"device": device}]
    with pytest.raises(SystemExit):
        main(["speak", "Hi.", "--precision", "float16"])


def test_cache_lists_what_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "cache"
    monkeypatch.setenv("GGTTS_HOME", str(home))
    assert main(["cache"]) == 0
    assert (
        capsys.readouterr().out
        == f"cache: {home} (set GGTTS_HOME to move it)\n  empty: built-in models are converted into it on first use\n"
    )
    (home / "misaki").mkdir(parents=True)
    (home / "misaki" / "lexicon-us.marshal").write_bytes(b"x" * 2048)
    (home / "model.gguf").write_bytes(b"y" * 1024)
    (home / ".model.gguf.lock").write_bytes(b"")
    assert main(["cache"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    assert rows == [["misaki/", "2.0", "KiB"], ["model.gguf", "1.0", "KiB"], ["total", "3.0", "KiB"]]
    assert main(["cache", "--path"]) == 0
    assert capsys.readouterr().out == f"{home}\n"


@pytest.mark.parametrize(("argv", "status"), [(["cache", "--path"], 0), (["info", "/no/such/model.gguf"], 1)])
def test_the_ggtts_command_exits_with_mains_status(argv: list[str], status: int) -> None:
    """The console script (:func:`ggtts.cli.run`: :func:`main`, then an exit with the collector frozen) keeps
    main's exit status and output."""
    code = f"import sys; sys.argv = ['ggtts', *{argv!r}]; from ggtts.cli import run; run()"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == status, done.stderr
    assert (done.stdout.strip() if status == 0 else done.stderr.strip()) != ""


@pytest.mark.parametrize(
    ("argv", "status", "teardown"),
    [
        (["speak", "Good morning.", "-o", "OUT"], 0, False),  # ends at once, its output whole
        (["speak", "Good morning.", "-o", "-"], 0, False),
        (["speak", "Good morning.", "-v", "nobody", "-o", "OUT"], 1, True),  # a failure exits as usual
        (["cache", "--path"], 0, True),  # so does every other command
    ],
)
def test_a_successful_speak_skips_the_interpreters_teardown(
    tmp_path: Path, argv: list[str], status: int, teardown: bool
) -> None:
    """The console script ends a successful ``speak`` without the interpreter's teardown (exit handlers do not
    run), once its output is flushed: the file, the WAV on standard output and the "wrote" line are whole."""
    out = tmp_path / "a.wav"
    argv = [str(out) if a == "OUT" else a for a in argv]
    code = (
        "import atexit, sys; atexit.register(lambda: print('teardown', file=sys.stderr)); "
        f"sys.argv = ['ggtts', *{argv!r}]; from ggtts.cli import run; run()"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=300, check=False)
    stderr = done.stderr.decode()
    assert done.returncode == status, stderr
    assert ("teardown" in stderr) == teardown
    if argv[-1] == str(out) and status == 0:  # and with standard output closed (sys.stdout None), or nowhere
        for stdout in ("closed", subprocess.DEVNULL):
            out.unlink()
            closed = subprocess.run(
                [sys.executable, "-c", code],
                stdout=stdout if stdout != "closed" else None,
                stderr=subprocess.PIPE,
                timeout=300,
                check=False,
                **({"preexec_fn": lambda: os.close(1)} if stdout == "closed" else {}),
            )
            assert closed.returncode == 0, closed.stderr.decode()
            assert sf.info(out).duration > 0.5
    if argv[0] == "speak" and status == 0:
        if argv[-1] == "-":
            audio, rate = sf.read(io.BytesIO(done.stdout), dtype="float32")
        else:
            audio, rate = sf.read(out, dtype="float32")
            assert f"wrote {out}" in stderr
        assert rate == 24000 and len(audio) > 24000 // 2
