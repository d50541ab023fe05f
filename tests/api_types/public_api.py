"""Uses of the public API that must type-check: never run, only read by mypy (pyproject's [tool.mypy] files, and
tests/test_types.py). A wrong annotation in the package shows here as an error in a caller's code."""

from __future__ import annotations

import ggtts


def a_stream_closed_early(model: ggtts.TTSModel) -> ggtts.Audio | None:
    """Closing a stream is how a caller gives up an utterance: the rest is never made."""
    stream = model.stream("A first clause, and more.")
    first = next(stream, None)
    stream.close()
    return first
