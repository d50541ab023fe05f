"""Voice cloning with a Qwen3-TTS Base model (x-vector mode): ``ggtts voice create`` makes a voice file of a
recording; the model beside it speaks with ``-v NAME`` as qwen-tts's ``generate_voice_clone`` does (the speaker
embedding in place of a preset speaker, the text streamed in), greedy codes teacher-forced; bad recordings and
names refused; the server takes the voice by name only."""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch
from _qwen3tts_tiny import Built, clone_generate, forced_greedy, need_qwen_tts

from ggtts.api import load
from ggtts.errors import GGUFError, InputError
from ggtts.families.base import UnknownVoiceError
from ggtts.families.qwen3tts.voices import create_voice, read_voice
from ggtts.measure.qwen3tts.upstream import voice_like
from ggtts.models.qwen3tts.speaker import SAMPLE_RATE

pytestmark = pytest.mark.needs_reference

TEXT = "Hello, world! How are you today?"
FRAMES = 44


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Built:
    need_qwen_tts()
    built = Built(tmp_path_factory.mktemp("qwen3tts_clone"), "base")
    soundfile.write(built.work / "ref.wav", voice_like(2.3, 5), SAMPLE_RATE)
    create_voice(built.path, built.work / "ref.wav", built.work / "anna.gguf")  # no text: the x-vector alone
    return built


def test_a_voice_file_holds_the_upstream_x_vector(base: Built) -> None:
    voice = read_voice(base.work / "anna.gguf")
    audio, _ = soundfile.read(base.work / "ref.wav", dtype="float32")
    theirs = base.upstream.extract_speaker_embedding(audio, SAMPLE_RATE)
    assert voice.name == "anna" and voice.text is None and voice.codes is None and not voice.in_context
    assert float((voice.embedding - theirs).abs().max()) <= 1e-5 * float(theirs.abs().max())


def test_cloned_speech_follows_upstream(base: Built) -> None:
    """The prompt and 40+ greedy frames of every codebook as qwen-tts clones (its embedding of the same recording
    given to it, ours read from the voice file)."""
    model = load(base.path)
    assert model.voices == ["anna"]
    voice = read_voice(base.work / "anna.gguf")
    codes, seen = clone_generate(base, TEXT, voice.embedding, FRAMES)
    inputs = model._inputs(TEXT, "english", "anna", None)
    assert inputs.prefill.shape == seen["inputs_embeds"].shape
    torch.testing.assert_close(inputs.prefill, seen["inputs_embeds"], rtol=0, atol=1e-5)
    torch.testing.assert_close(inputs.trailing, seen["trailing_text_hidden"], rtol=0, atol=1e-5)
    ours, ties = forced_greedy(model.talker, inputs, codes, FRAMES)
    assert codes.shape[-1] >= 40
    assert torch.equal(ours, codes) and not ties
    speech = model.synthesize(TEXT, voice="anna", language="english", temperature=0, max_frames=FRAMES)
    with torch.no_grad():
        theirs = base.up_decoder(codes)[0, 0].numpy()
    np.testing.assert_allclose(speech.samples, theirs, rtol=0, atol=1e-4)


def test_bad_recordings_and_names_are_refused(base: Built, tmp_path: Path) -> None:
    out = tmp_path / "v.gguf"
    soundfile.write(tmp_path / "short.wav", voice_like(0.5, 1), SAMPLE_RATE)
    with pytest.raises(InputError, match=r"0\.50 s of audio"):
        create_voice(base.path, tmp_path / "short.wav", out)
    soundfile.write(tmp_path / "silent.wav", np.zeros(SAMPLE_RATE * 2, np.float32), SAMPLE_RATE)
    with pytest.raises(InputError, match="silent"):
        create_voice(base.path, tmp_path / "silent.wav", out)
    (tmp_path / "text.wav").write_text("not audio")
    with pytest.raises(InputError, match="not an audio file"):
        create_voice(base.path, tmp_path / "text.wav", out)
    with pytest.raises(InputError, match="voice name"):
        create_voice(base.path, base.work / "ref.wav", out, name="../etc/passwd")
    with pytest.raises(InputError, match=f"^{re.escape(str(tmp_path))}: a folder, not a recording$"):
        create_voice(base.path, tmp_path, out)
    with pytest.raises(GGUFError, match="no speaker encoder"):
        design = Built(tmp_path / "vd", "voice_design")
        create_voice(design.path, base.work / "ref.wav", out)
    assert not out.exists()


def test_a_file_that_is_not_a_voice_is_never_written_over(base: Built, tmp_path: Path) -> None:
    """-o naming the model, its mmproj or any other file by mistake is refused before any work, the file intact."""
    notes = tmp_path / "notes.gguf"
    notes.write_text("my notes")
    for target in (base.path, base.mmproj_file.path, notes):
        before = Path(target).read_bytes()
        with pytest.raises(InputError, match=rf"^{re.escape(str(target))} exists and is not a voice file"):
            create_voice(base.path, base.work / "ref.wav", target, name="carl")
        assert Path(target).read_bytes() == before


def test_a_name_taken_beside_the_model_is_refused(base: Built, tmp_path: Path) -> None:
    """A second file beside the model named as a voice there would never be spoken (the first in name order is):
    refused before any work, naming the file; writing over that file, or another name, is fine."""
    taken = base.work / "anna.gguf"
    other = base.work / "zz-anna-again.gguf"
    with pytest.raises(
        InputError, match=rf"a voice named 'anna' is already beside the model \({re.escape(str(taken))}\)"
    ):
        create_voice(base.path, base.work / "ref.wav", other, name="anna")
    assert not other.exists()
    before = taken.stat().st_mtime_ns
    create_voice(base.path, base.work / "ref.wav", taken)  # the same file again
    assert taken.stat().st_mtime_ns != before
    linked = tmp_path / "linked"  # a model that is a link into another folder (a hub cache's snapshot, say)
    linked.mkdir()
    (linked / "m.gguf").symlink_to(base.path)
    (linked / "mmproj-m.gguf").symlink_to(base.mmproj_file.path)
    shutil.copy(taken, linked / "anna.gguf")
    with pytest.raises(InputError, match="a voice named 'anna' is already beside the model"):
        create_voice(linked / "m.gguf", base.work / "ref.wav", linked / "other.gguf", name="anna")


def test_a_damaged_voice_file_is_named_not_unknown(
    base: Built, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A voice file whose metadata reads but whose speaker embedding is not finite numbers: listed beside the model
    (from its metadata), so asking for it is an error naming the damage, not "unknown voice"; the load warns."""
    import gguf

    from ggtts.gguf.keys import Qwen3TTSVoice

    folder = tmp_path / "models"
    folder.mkdir()
    for f in (base.path, base.mmproj_file.path, base.work / "anna.gguf"):
        shutil.copy(f, folder / Path(f).name)
    bea = create_voice(folder / base.path.name, base.work / "ref.wav", folder / "bea.gguf", name="bea")
    reader = gguf.GGUFReader(bea, "r+")
    next(t for t in reader.tensors if t.name == Qwen3TTSVoice.EMBEDDING).data[:] = np.nan
    del reader
    with caplog.at_level("WARNING"):
        model = load(folder / base.path.name)
    assert model.voices == ["anna"] and f"{bea} ('bea') is damaged" in caplog.text
    with pytest.raises(InputError, match=r"^voice 'bea' cannot be spoken: its file is damaged \(.*not .* finite"):
        model.synthesize(TEXT, voice="bea", max_frames=2)
    with pytest.raises(UnknownVoiceError):
        model.synthesize(TEXT, voice="carl", max_frames=2)


def test_info_says_what_a_voice_file_is(base: Built, capsys: pytest.CaptureFixture[str]) -> None:
    from ggtts.cli import main

    assert main(["info", str(base.work / "anna.gguf")]) == 0
    out = capsys.readouterr().out
    assert (
        "(a qwen3tts file: a cloned voice for a Base model (ggtts voice create)" in out and "not supported" not in out
    )


def test_a_batch_item_knows_its_voice_file(base: Built, tmp_path: Path) -> None:
    """Batch records stamp a cloned voice's own file: the voice made again under its name is spoken again."""
    from ggtts.batch.items import Item
    from ggtts.batch.work import JobSettings, source_stamps

    folder = tmp_path / "models"
    folder.mkdir()
    for f in (base.path, base.mmproj_file.path, base.work / "anna.gguf"):
        shutil.copy(f, folder / Path(f).name)
    settings = JobSettings(out_dir=tmp_path / "out", model=str(folder / base.path.name), voice="anna")
    item = Item(id="a", text=TEXT)

    def sources(settings: JobSettings) -> dict[str, list[int]]:  # (what the job stamps the item's record with)
        request = settings.request(item)
        return source_stamps(request["model"], request["voice"])

    before = sources(settings)
    assert set(before) == {"model", "voice"} and before["voice"][0] == (folder / "anna.gguf").stat().st_size
    stat = (folder / "anna.gguf").stat()
    os.utime(folder / "anna.gguf", ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))  # made again
    assert sources(settings)["voice"] != before["voice"]
    assert set(sources(JobSettings(out_dir=tmp_path, model=settings.model))) == {"model"}  # no voice file


def test_a_voice_is_a_name_never_a_path(base: Built) -> None:
    model = load(base.path)
    with pytest.raises(UnknownVoiceError):
        model.synthesize(TEXT, voice=str(base.work / "anna.gguf"))


def test_command_line_creates_and_speaks(base: Built, tmp_path: Path) -> None:
    import subprocess

    folder = tmp_path / "models"
    folder.mkdir()
    for f in (base.path, base.path.with_name(f"mmproj-{base.path.name}")):
        shutil.copy(f, folder / f.name)
    model = folder / base.path.name
    cmd = [sys.executable, "-m", "ggtts.cli"]
    create = [*cmd, "voice", "create", str(base.work / "ref.wav"), "-m", str(model), "-o", str(folder / "mine.gguf")]
    made = subprocess.run([*create, "--name", "bob"], capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr
    assert "speak with -v bob" in made.stderr
    listed = subprocess.run([*cmd, "voices", "-m", str(model)], capture_output=True, text=True, timeout=300)
    assert [line.split()[0] for line in listed.stdout.splitlines()] == ["bob"]
    wav = tmp_path / "bob.wav"
    spoke = subprocess.run([*cmd, "speak", "-m", str(model), "-v", "bob", "--max-frames", "5", "-o", str(wav), TEXT],
                           capture_output=True, text=True, timeout=300)  # fmt: skip
    assert spoke.returncode == 0, spoke.stderr
    assert wav.stat().st_size > 44


def test_a_base_model_has_no_default_voice(base: Built, tmp_path: Path) -> None:
    """Without -v a Base model speaks with no speaker (as qwen-tts without a voice prompt), whatever voice files
    lie beside it; a voice file must be named *.gguf to be found."""
    model = load(base.path)
    assert model.voices == ["anna"] and model.default_voice is None
    with pytest.raises(InputError, match=r"ends in \.gguf"):
        create_voice(base.path, base.work / "ref.wav", tmp_path / "anna")
