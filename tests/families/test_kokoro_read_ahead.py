"""``ggtts speak`` reads Kokoro's text in a child process while torch is imported and the model loads
(:class:`ggtts.families.kokoro.frontend.TextAhead`). Each check runs in a fresh interpreter: the read-ahead forks
only a process of one thread that has not imported torch, which a pytest process is not."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

import ggtts
from ggtts.families.kokoro.frontend import read_ahead
from ggtts.families.kokoro.pipeline import KokoroTTS
from ggtts.gguf import GGUFFile

TIMEOUT_S = 300  # catches a hang only

# The tiny model reads 62 phonemes at a time: the first text is said in several chunks, one cutting the number.
CHILD_CHECKS = r"""
import json, os, sys
from ggtts.families.kokoro import frontend
from ggtts.text.lexicon import Lexicon
from ggtts.text.normalize import AS_WRITTEN, NORMALIZE_ALL

vocab = frozenset(json.loads(sys.argv[1]))
cases = {
    "several chunks": (
        "I paid $1,234,567.89 today. Then at 3:45 pm, Dr. Smith left!", "a", 62, vocab, NORMALIZE_ALL, None
    ),
    "british": ("The colour of 2 GB.", "b", 510, vocab, NORMALIZE_ALL, None),
    "as written": ("It is 2 GB.", "a", 510, vocab, AS_WRITTEN, None),
    "lexicon": ("I use ggtts.", "a", 510, vocab, NORMALIZE_ALL, Lexicon.of({"ggtts": "banana"})),
}
results = {"torch before": "torch" in sys.modules}
import threading
from ggtts.gguf import GGUFFile

gguf = GGUFFile(sys.argv[2])
results["phonemes"] = frontend.read_ahead(gguf, "hˈI", {"phonemes": True})
release = threading.Event()
other_thread = threading.Thread(target=release.wait)
other_thread.start()
results["two threads"] = frontend.read_ahead(gguf, "Hello.", {})
release.set()
other_thread.join()
chosen = frontend.read_ahead(gguf, "Hello.", {"normalization": False}, {"Hello": "Howdy"})["phonemizer"]
results["key"] = [chosen.key[0], chosen.key[1], chosen.key[2], chosen.key[3] == vocab, chosen.key[4] == AS_WRITTEN,
                  chosen.key[5] == Lexicon.of({"Hello": "Howdy"})]
results["read ahead"] = list(chosen(*chosen.key)) == list(frontend.text_frontend(*chosen.key))
for name, key in cases.items():
    ahead = frontend.TextAhead(key)
    got = list(ahead(*key))
    results[name] = [got == list(frontend.text_frontend(*key)), ahead.taken, len(got)]
key = cases["several chunks"]
ahead = frontend.TextAhead(key)
ahead._child.kill()  # a child that dies before it sends anything: the text is read here
results["killed"] = [list(ahead(*key)) == list(frontend.text_frontend(*key)), ahead.taken]
real, parent = frontend.text_frontend, os.getpid()

def failing_in_the_child(*args):
    for i, chunk in enumerate(real(*args)):
        if i == 1 and os.getpid() != parent:
            raise RuntimeError("the child fails after its first chunk")
        yield chunk

frontend.text_frontend = failing_in_the_child
ahead = frontend.TextAhead(key)
results["failed after one"] = [list(ahead(*key)) == list(real(*key)), ahead.taken]
frontend.text_frontend = real
from ggtts.text.chunking import Chunk

def large(*args):
    for _ in range(8):
        yield Chunk("x" * 100_000, "x")  # each more than a pipe holds

frontend.text_frontend = large
ahead = frontend.TextAhead(key)
ahead._receive.close()  # a parent that stops listening: the child ends, quietly
ahead._child.join(60)  # a hang only: it ends at its first send
results["parent gone"] = ahead._child.exitcode
if ahead._child.exitcode is None:
    ahead._child.kill()
import time

def slow_in_the_child(*args):
    if os.getpid() != parent:
        time.sleep(600)
    yield from real(*args)

frontend.text_frontend = slow_in_the_child
ahead = frontend.TextAhead(key)
child = ahead._child
other = ("Something else.", *key[1:])
results["another text"] = [list(ahead(*other)) == list(real(*other)), ahead.taken, child.is_alive()]
frontend.text_frontend = real

# a parent killed outright (SIGKILL: no exit handler runs) while its child reads a text that never ends
import signal, subprocess
code = (
    "import time\nfrom ggtts.families.kokoro import frontend\n"
    "frontend.text_frontend = lambda *a: iter([time.sleep(600)])\n"
    "ahead = frontend.TextAhead(('x', 'a', 62, frozenset(), None, None))\n"
    "print(ahead._child.pid, flush=True)\ntime.sleep(600)\n"
)
parent_process = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
orphan = int(parent_process.stdout.readline())
parent_process.kill()
parent_process.wait()

def gone(pid):
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")  # ended, not yet reaped
    except FileNotFoundError:
        return True

for _ in range(600):  # a hang only: it ends with its parent
    if gone(orphan):
        break
    time.sleep(0.1)
results["orphan gone"] = gone(orphan)
if not results["orphan gone"]:
    os.kill(orphan, signal.SIGKILL)
print(json.dumps(results))
"""

CLI_RUN = r"""
import json, sys
from ggtts.families.kokoro import frontend

taken = []
received = frontend.TextAhead._received

def counted(self, child):
    for chunk in received(self, child):
        taken.append(chunk.phonemes)
        yield chunk

frontend.TextAhead._received = counted
from ggtts.cli import main

status = main(["speak", "-m", sys.argv[1], sys.argv[2], "-o", sys.argv[3], "-v", "v_one", *sys.argv[4:]])
print(json.dumps([status, taken]))
"""


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("kokoro")
    from ggtts.measure.kokoro.upstream import write_tiny_gguf

    return write_tiny_gguf(tmp_path_factory.mktemp("kokoro") / "tiny.gguf", name="tiny")


def _python(code: str, *args: str) -> dict | list:
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr, done.stderr  # no child said anything either
    result: dict | list = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_the_child_reads_what_the_frontend_reads(tiny: Path) -> None:
    model = ggtts.load(str(tiny))
    assert isinstance(model, KokoroTTS)
    results = _python(CHILD_CHECKS, json.dumps(sorted(model.vocab)), str(tiny))
    assert isinstance(results, dict)
    assert results.pop("torch before") is False
    assert results.pop("phonemes") == {} and results.pop("two threads") == {}  # phonemes; not one thread
    assert results.pop("key") == ["Hello.", "a", 62, True, True, True]  # as the model will ask for the text
    assert results.pop("read ahead") is True
    several = results.pop("several chunks")
    assert several[0] is True and several[1] == several[2] >= 3  # every chunk the child's, and the same
    assert results.pop("british")[:2] == [True, 1]
    assert results.pop("as written")[:2] == [True, 1]
    assert results.pop("lexicon")[:2] == [True, 1]
    assert results == {
        "killed": [True, 0],  # all read here
        "failed after one": [True, 1],  # the first from the child, the rest read here, none twice
        "parent gone": 0,
        "another text": [True, 0, False],  # read here, the child stopped
        "orphan gone": True,
    }


def test_speak_uses_the_text_read_ahead_and_says_the_same(tiny: Path, tmp_path: Path) -> None:
    text = "I paid $1,234,567.89 today."
    out = tmp_path / "ahead.wav"
    status, taken = _python(CLI_RUN, str(tiny), text, str(out))
    assert status == 0
    model = ggtts.load(str(tiny))
    assert isinstance(model, KokoroTTS)
    vocab = frozenset(model.vocab)
    here = [c.phonemes for c in model.phonemizer(text, "a", model.config.max_phonemes, vocab)]
    assert taken == here and len(taken) >= 2  # the child's chunks, all of them, as this process reads the text
    said, rate = sf.read(out, dtype="int16")
    expected = model.synthesize(text, voice="v_one")
    assert rate == expected.sample_rate
    pcm = np.frombuffer(expected.pcm16(), dtype="<i2")
    assert len(said) == len(pcm) and np.abs(said.astype(np.int32) - pcm).max() <= 2  # threads may differ: 2 LSB


def test_speak_reads_ahead_with_the_lexicon_the_model_is_given(tiny: Path, tmp_path: Path) -> None:
    """``--lexicon``: the text read ahead is read with it, as the model will read it (else the child's reading
    would be of another key, and of no use)."""
    lexicon = tmp_path / "words.txt"
    lexicon.write_text("ggtts = banana\n", encoding="utf-8")
    status, taken = _python(CLI_RUN, str(tiny), "I use ggtts.", str(tmp_path / "out.wav"), "--lexicon", str(lexicon))
    assert status == 0
    model = ggtts.load(str(tiny))
    assert isinstance(model, KokoroTTS)
    here = [
        c.phonemes for c in model.phonemizer("I use banana.", "a", model.config.max_phonemes, frozenset(model.vocab))
    ]
    assert taken == here


def test_no_read_ahead_after_torch_is_imported(tiny: Path) -> None:
    gguf = GGUFFile(tiny)
    assert "torch" in sys.modules  # this process: a fork would copy torch's threads
    assert read_ahead(gguf, "Hello there.", {}) == {}
