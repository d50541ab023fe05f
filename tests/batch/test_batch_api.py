"""``run_batch`` called from Python: items and settings made by hand are checked as the command line's are, so a
mistake is one InputError (or OutputError) before any work, and nothing is written outside the output folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from batch_support import TinyModel

from ggtts.batch import Item, JobSettings, run_batch
from ggtts.errors import GGTTSError, InputError


@pytest.mark.parametrize(
    ("items", "message"),
    [
        ([Item("../escape", "Hi.")], r"items\[0\]: id '../escape' cannot name a file"),
        ([Item("/tmp/abs", "Hi.")], r"items\[0\]: id '/tmp/abs' cannot name a file"),
        ([Item("a/../../b", "Hi.")], r"items\[0\]: id 'a/../../b' cannot name a file"),
        ([Item("a", "Hi."), Item("A", "Bye.")], r"items\[1\]: id 'A' is also used at items\[0\]"),
        ([Item("a", "Hi."), "b"], r"items\[1\] is a str, not a ggtts.batch.Item"),
        ([Item("cafe\u0301", "Hi.")], r"items\[0\]: id 'cafe\u0301' is not a file name of NFC text"),
        ("one text", r"items must be a list of ggtts.batch.Item, got str"),
    ],
)
def test_items_made_in_python_are_checked_before_any_work(
    tiny_model: TinyModel, tmp_path: Path, items: Any, message: str
) -> None:
    out = tmp_path / "out"
    with pytest.raises(InputError, match=message):
        run_batch(items, JobSettings(out_dir=out, model=str(tiny_model.path)))
    assert list(tmp_path.iterdir()) == []  # (nor the output folder, nor anything beside it)


def test_items_may_come_from_a_generator(tiny_model: TinyModel, tmp_path: Path) -> None:
    items = (Item(f"n{i}", f"Item {i}.") for i in range(2))
    result = run_batch(items, JobSettings(out_dir=tmp_path / "out", model=str(tiny_model.path), voice="v_one"))
    assert (result.done, result.failed) == (2, 0)
    assert sorted(p.name for p in (tmp_path / "out").glob("*.wav")) == ["n0.wav", "n1.wav"]


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"out_dir": None}, "out_dir must be a folder's path, got NoneType"),
        ({"options": None}, "options must be a dict of family options, got NoneType"),
        ({"load_options": None}, "load_options must be a dict of load options, got NoneType"),
        ({"voice": 123}, r"voice must be a voice.s name, a blend \(str\) or None, got int"),
        ({"speed": True}, "speed must be a number, got bool"),
        ({"speed": "1.2"}, "speed must be a number, got str"),
        ({"float_wav": "yes"}, "float_wav must be true or false, got str"),
        ({"format": "flac", "float_wav": True}, "float_wav applies to WAV only, not flac"),
    ],
)
def test_settings_of_the_wrong_type_are_one_input_error(tmp_path: Path, settings: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError, match=message):
        JobSettings(**{"out_dir": tmp_path / "out", **settings})


@pytest.mark.parametrize(
    ("workers", "threads", "message"),
    [
        ("2", None, "workers must be a whole number of at least 1, got '2'"),
        (1.5, None, "workers must be a whole number of at least 1, got 1.5"),
        (True, None, "workers must be a whole number of at least 1, got True"),
        (1, "1", "threads must be a whole number of at least 1, got '1'"),
    ],
)
def test_workers_and_threads_are_whole_numbers(tmp_path: Path, workers: Any, threads: Any, message: str) -> None:
    with pytest.raises(InputError, match=message):
        run_batch([Item("a", "Hi.")], JobSettings(out_dir=tmp_path / "out"), workers=workers, threads=threads)


def test_an_output_folder_that_cannot_be_made_is_one_error_before_any_work(
    tiny_model: TinyModel, tmp_path: Path
) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("not a folder")
    with pytest.raises(GGTTSError, match=r"cannot write the output: .*file is not a directory"):
        run_batch([Item("a", "Hi.")], JobSettings(out_dir=a_file, model=str(tiny_model.path)))
    assert a_file.read_text() == "not a folder"
