"""A hold inside ``ggtts bench``'s worker, for tests/measure/test_bench_lifetime.py: put this folder on PYTHONPATH and
set GGTTS_TEST_BENCH_PAUSE_DIR=DIR, and the worker timing the ``ggtts`` engine first makes a temporary folder with a
file in it, as the ONNX peer does for its model copy (in the scratch folder it is given, else the system's), then
writes DIR/reached (its pid) and waits until DIR/release exists. A test ends the benchmark while its worker is known
to be inside its work, without racing it."""

import os
from pathlib import Path

_PAUSE = os.environ.get("GGTTS_TEST_BENCH_PAUSE_DIR")
if _PAUSE:
    import contextlib
    import tempfile
    import time

    from ggtts.measure.kokoro import peers as _peers

    _pause_dir = Path(_PAUSE)
    _engine = _peers.ENGINES["ggtts"]
    MODEL_COPY_BYTES = 1 << 20

    @contextlib.contextmanager
    def _pausing(model_path, voice, scratch=None):  # type: ignore[no-untyped-def]
        with tempfile.TemporaryDirectory(prefix="ggtts-bench-", dir=scratch) as tmp:
            (Path(tmp) / "model.onnx").write_bytes(bytes(MODEL_COPY_BYTES))
            (_pause_dir / "reached.part").write_text(str(os.getpid()))
            (_pause_dir / "reached.part").replace(_pause_dir / "reached")  # whole when it appears
            while not (_pause_dir / "release").exists():
                time.sleep(0.01)
            with _engine(model_path, voice) as synthesize:
                yield synthesize

    _peers.ENGINES["ggtts"] = _pausing
