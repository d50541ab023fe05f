"""Uses of the public API that must type-check: never run, only read by mypy (pyproject's [tool.mypy] files, and
tests/test_types.py). A wrong annotation in the package shows here as an error in a caller's code."""

from __future__ import annotations

from pathlib import Path
from typing import assert_type

import ggtts
from ggtts.batch import JobSettings


def a_stream_closed_early(model: ggtts.TTSModel) -> ggtts.Audio | None:
    """Closing a stream is how a caller gives up an utterance: the rest is never made."""
    stream = model.stream("A first clause, and more.")
    first = next(stream, None)
    stream.close()
    return first


def a_job_into_a_folder_named_by_a_str() -> Path:
    """A job's folder given as text (as the README's example does), read back as a Path."""
    settings = JobSettings(out_dir="corpus", voice="jf_alpha")
    assert_type(settings.out_dir, Path)
    return settings.out_dir / "manifest.jsonl"
