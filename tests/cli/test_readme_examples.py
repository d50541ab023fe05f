"""The README's examples, run: so the front door cannot drift from what the program does.

Every ``ggtts`` command in the README's shell blocks is parsed by the real argument parser (a flag that does not
exist, a value out of range, a command that was renamed: a failure). Those that run offline in seconds are run
in a scratch folder with the files they name, and must exit 0 and write what they say: each ``ggtts speak``
line, ``ggtts voices``, ``ggtts info kokoro``. The Python API block is run as it is written. Left to their own
tests (they start servers or worker processes): ``serve``, ``wyoming``, ``batch``, the install and test commands.
"""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import subprocess
import sys
import wave
from collections.abc import Iterator
from pathlib import Path

import pytest

from ggtts import cli
from ggtts.convert.default_model import default_model_path

pytestmark = pytest.mark.needs_weights

README = Path(__file__).resolve().parents[2] / "README.md"
RUN = {"speak", "voices", "info"}  # commands run here; the rest are parsed only
NOT_RUN = {"serve", "wyoming", "batch", "convert", "decode", "eval", "bench", "parity"}
WRITTEN = re.compile(r"-o\s+(\S+)|--timestamps\s+(\S+)")


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README.read_text(), re.S)


def ggtts_commands() -> list[str]:
    """Each shell line of the README that runs ``ggtts``, its comment left out (a pipe's other side kept)."""
    lines = []
    for block in blocks("bash"):
        for line in block.splitlines():
            if "ggtts " in line and not line.lstrip().startswith(("python", "pip", "CMAKE_ARGS", "#")):
                lines.append(line.strip())
    return lines


def ggtts_argv(line: str) -> list[str]:
    """The arguments of the ``ggtts`` part of ``line`` (after ``... |``, before ``| ...``), as the shell splits
    them, comments dropped."""
    for part in line.split("|"):
        words = shlex.split(part, comments=True)
        if words[:1] == ["ggtts"]:
            return words[1:]
    raise AssertionError(f"no ggtts command in {line!r}")


COMMANDS = ggtts_commands()


def test_the_readme_has_the_examples_this_test_knows() -> None:
    kinds = {ggtts_argv(line)[0] for line in COMMANDS}
    assert {"speak", "serve", "batch", "wyoming"} <= kinds, kinds
    assert kinds <= RUN | NOT_RUN, f"a new command in the README: run it here, or list it in NOT_RUN: {kinds}"
    assert len([c for c in COMMANDS if ggtts_argv(c)[0] == "speak"]) >= 5


@pytest.mark.parametrize("line", COMMANDS)
def test_every_command_parses(line: str) -> None:
    parser = cli.build_parser()
    with contextlib.redirect_stderr(io.StringIO()) as err:
        try:
            parser.parse_args(ggtts_argv(line))
        except SystemExit as exit:
            pytest.fail(f"{line!r} does not parse: {err.getvalue().strip()} (exit {exit.code})")


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A folder with the files the examples name: a chapter, a lexicon, another model file (the default model,
    linked)."""
    folder = tmp_path_factory.mktemp("readme")
    (folder / "chapter.txt").write_text("A short chapter. It has two sentences.\n")
    (folder / "words.txt").write_text("ggtts = gee gee tee tee ess\n")
    path = default_model_path()
    if not path.exists():
        assert cli.main(["info", "kokoro"]) == 0  # builds the default model, as a first speak would
    (folder / "my-model.gguf").symlink_to(path)
    with contextlib.chdir(folder):
        yield folder


@pytest.mark.parametrize("line", [c for c in COMMANDS if ggtts_argv(c)[0] in RUN])
def test_offline_examples_run_and_write_what_they_say(line: str, scratch: Path) -> None:
    argv = ggtts_argv(line)
    if line.startswith("echo"):  # standard input to standard output: the real pipe, up to the player
        shell = line.split("| aplay")[0].replace("ggtts ", f"{Path(sys.executable).parent / 'ggtts'} ", 1)
        out = subprocess.run(shell, shell=True, capture_output=True, timeout=600, cwd=scratch)
        assert out.returncode == 0, out.stderr.decode()
        assert out.stdout[:4] == b"RIFF" and len(out.stdout) > 24000
        return
    assert cli.main(argv) == 0, line
    for audio, captions in WRITTEN.findall(line):
        if audio and audio != "-":
            assert (scratch / audio).stat().st_size > 8000, audio
            if audio.endswith(".wav"):
                with wave.open(str(scratch / audio)) as w:
                    assert w.getnframes() / w.getframerate() > 0.5
        if captions:
            text = (scratch / captions).read_text()
            assert text.startswith("WEBVTT") and "$5" in text, text  # the shell kept "$5" (single quotes)


def test_the_python_api_block_runs(scratch: Path) -> None:
    code = blocks("python")[0]
    assert "ggtts.load()" in code
    exec(compile(code, "README.md (Python API)", "exec"), {})
    with wave.open(str(scratch / "hello.wav")) as w:
        assert w.getnframes() > 0


def test_every_python_block_compiles() -> None:
    for number, code in enumerate(blocks("python")):
        compile(code, f"README.md python block {number}", "exec")
