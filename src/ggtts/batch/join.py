"""``--join``: the job's items in input order as one audio file, with a pause between them, and a chapter list
beside it: ``NAME.chapters.json`` (id, title, start and end in seconds) and ``NAME.ffmetadata`` (ffmpeg's
metadata format, so ``ffmpeg -i NAME.wav -i NAME.ffmetadata -map_metadata 1 -c:a aac NAME.m4b`` makes an
audiobook with chapters). Items are read back one at a time: an hours-long join never holds all of its audio.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import soundfile as sf

from ggtts.audio import check_output_suffix, encoded_rate, resample, soundfile_format
from ggtts.batch.items import Item
from ggtts.batch.manifest import DONE
from ggtts.errors import GGTTSError, InputError
from ggtts.fsutil import atomic_output, remove_stale_parts_of

if TYPE_CHECKING:
    from ggtts.batch.work import JobSettings

TITLE_CHARS = 60  # an item without a title is named by the start of its text
MS_PER_S = 1000
DEFAULT_PAUSE_S = 0.5  # between two items of --join's file
MAX_PAUSE_S = 60.0  # between two items; more is a mistake (or a job for an audio editor)


def chapter_title(item: Item) -> str:
    if item.title:
        return item.title
    words = " ".join(item.text.split())
    return words if len(words) <= TITLE_CHARS else words[: TITLE_CHARS - 1].rsplit(" ", 1)[0] + "…"


def check_pause(pause_s: float) -> float:
    """``pause_s`` if it is a pause a join can make (0 to :data:`MAX_PAUSE_S` seconds), else an InputError."""
    if not 0 <= pause_s <= MAX_PAUSE_S:  # NaN fails both comparisons
        raise InputError(f"the pause must be 0 to {MAX_PAUSE_S:g} seconds, got {pause_s}")
    return pause_s


def check_join_target(target: Path, items: Sequence[Item], settings: JobSettings) -> None:
    """The joined file must not be one of the items' own files (it would be replaced by the whole, and spoken and
    joined again on every run)."""
    where = target.resolve()
    for item in items:
        if (settings.out_dir / settings.output(item)).resolve() == where:
            raise InputError(f"--join {target} is item '{item.id}''s own file; join into a file of its own")


def join_outputs(
    items: Sequence[Item], records: dict[str, dict[str, Any]], out_dir: Path, target: Path, pause_s: float
) -> list[dict[str, Any]]:
    """Write ``target`` and its chapter files; the chapters. Every item must be done."""
    suffix = check_output_suffix(target)
    check_pause(pause_s)
    missing = [item.id for item in items if records.get(item.id, {}).get("status") != DONE]
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise GGTTSError(f"cannot join: {len(missing)} items have no audio ({shown})")
    rates = {sf.info(str(out_dir / records[item.id]["output"])).samplerate for item in items}  # the files' own
    if len(rates) != 1:
        raise GGTTSError(f"cannot join: the items have different sample rates {sorted(rates)} (different models?)")
    fmt, subtype = soundfile_format(suffix)
    items_rate = rates.pop()
    rate = encoded_rate(suffix.lstrip("."), items_rate)  # (as Audio.write_to encodes)
    silence = np.zeros(round(pause_s * rate), dtype=np.float32)
    chapters: list[dict[str, Any]] = []
    remove_stale_parts_of([target, *_chapter_files(target)])  # a join killed outright left its temporary files
    position = 0
    with atomic_output(target) as tmp, sf.SoundFile(tmp, "w", rate, 1, subtype, format=fmt) as out:
        for n, item in enumerate(items):
            if n and len(silence):
                out.write(silence)
                position += len(silence)
            samples, _ = sf.read(out_dir / records[item.id]["output"], dtype="float32")
            samples = resample(samples, items_rate, rate)
            out.write(samples)
            chapters.append({"id": item.id, "title": chapter_title(item), "start": position / rate})
            position += len(samples)
            chapters[-1]["end"] = position / rate
    _write_chapters(target, chapters)
    return chapters


def _chapter_files(target: Path) -> tuple[Path, Path]:
    """The chapters beside ``target``: as JSON, and as ffmpeg's metadata."""
    stem = target.with_suffix("")
    return stem.with_name(stem.name + ".chapters.json"), stem.with_name(stem.name + ".ffmetadata")


def _write_chapters(target: Path, chapters: list[dict[str, Any]]) -> None:
    as_json, as_ffmetadata = _chapter_files(target)
    doc = {"audio": target.name, "chapters": chapters}
    with atomic_output(as_json) as tmp:
        tmp.write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    lines = [";FFMETADATA1"]
    for c in chapters:
        title = _ffmeta_escape(c["title"])
        start, end = round(c["start"] * MS_PER_S), round(c["end"] * MS_PER_S)
        lines += ["[CHAPTER]", "TIMEBASE=1/1000", f"START={start}", f"END={end}", f"title={title}"]
    with atomic_output(as_ffmetadata) as tmp:
        tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _ffmeta_escape(text: str) -> str:
    """ffmpeg's metadata escaping: '=', ';', '#', '\\' and newlines take a backslash."""
    for ch in "\\=;#":
        text = text.replace(ch, "\\" + ch)
    return text.replace("\n", "\\\n")
