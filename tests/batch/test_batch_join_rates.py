"""``--join`` reads each item file's own rate: Opus items of a 22,050 Hz voice (Piper's, Magpie's) are encoded at
48 kHz, so a join that took the model's rate from the manifest wrote them 2.2x too slow (into a WAV) or failed after
the whole job (into Opus). Items joined into Opus at a rate it does not encode are resampled as files are."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from ggtts.audio import Audio
from ggtts.batch.items import Item
from ggtts.batch.join import join_outputs
from ggtts.batch.manifest import DONE

RATE = 22050
SECONDS = 2.0


def _items(tmp_path: Path, fmt: str) -> tuple[list[Item], dict[str, dict[str, object]]]:
    items, records = [], {}
    for n in range(2):
        tone = 0.4 * np.sin(np.arange(int(SECONDS * RATE)) * (2 * np.pi * 440 / RATE)).astype(np.float32)
        name = f"{n}.{fmt}"
        Audio(tone, RATE).save(tmp_path / name)
        items.append(Item(id=str(n), text=f"item {n}"))
        records[str(n)] = {"status": DONE, "output": name, "sample_rate": RATE}  # (an older manifest's rate)
    return items, records


@pytest.mark.parametrize(
    ("items_format", "joined", "rate"),
    [("opus", "wav", 48000), ("opus", "opus", 48000), ("wav", "opus", 48000), ("wav", "wav", RATE)],
)
def test_a_join_keeps_the_items_time(tmp_path: Path, items_format: str, joined: str, rate: int) -> None:
    items, records = _items(tmp_path, items_format)
    target = tmp_path / f"book.{joined}"
    chapters = join_outputs(items, records, tmp_path, target, pause_s=0.5)
    samples, got = sf.read(target, dtype="float32")
    assert got == rate
    assert abs(len(samples) / got - (2 * SECONDS + 0.5)) < 0.05  # two items and the pause, in seconds
    assert [round(c["start"], 2) for c in chapters] == [0.0, pytest.approx(SECONDS + 0.5, abs=0.03)]
