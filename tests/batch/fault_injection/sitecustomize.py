"""Fault injection for tests/batch/test_batch_workers.py: put this folder on PYTHONPATH and set
GGTTS_TEST_DIE_ON_ITEM=ID, and a process that starts speaking item ID dies at once, before writing anything (as a
segfault or the out-of-memory killer would end it). With GGTTS_TEST_DIE_ONCE=PATH it dies only the first time:
it writes its pid to PATH, and later attempts, which find PATH, speak the item. What is tested is how the pool
of workers handles the death.

GGTTS_TEST_DIE_AFTER_ITEM=ID: a worker process dies right after it has sent the record of item ID back (between
two items, as a process killed from outside usually is).

GGTTS_TEST_RAISE_ON_ITEM=ID: speaking item ID raises KeyboardInterrupt, which an item's own error handling does not
catch (a worker's failure outside an item's speech); with GGTTS_TEST_DIE_ONCE=PATH only the first time, as above.

GGTTS_TEST_PAUSE_ON_ITEM=ID with GGTTS_TEST_PAUSE_DIR=DIR: a process that starts speaking item ID writes DIR/reached
(its pid) and waits, the item in progress, until DIR/release exists; then it speaks the item. A test signals the
job at a known point of it (a count of items, not a moment) without racing it."""

import os
from pathlib import Path

_DIE_ON = os.environ.get("GGTTS_TEST_DIE_ON_ITEM")
_ONCE = os.environ.get("GGTTS_TEST_DIE_ONCE")
if _DIE_ON:
    import ggtts.batch.work as _work

    _run = _work.ItemWorker.run

    def _dying_run(self, item):  # type: ignore[no-untyped-def]
        if item.id == _DIE_ON:
            if _ONCE is None:
                os._exit(139)
            marker = Path(_ONCE)
            if not marker.exists():
                marker.write_text(str(os.getpid()))
                os._exit(139)
        return _run(self, item)

    _work.ItemWorker.run = _dying_run  # type: ignore[method-assign]

_PAUSE_ON = os.environ.get("GGTTS_TEST_PAUSE_ON_ITEM")
if _PAUSE_ON:
    import time

    import ggtts.batch.work as _work

    _pause_dir = Path(os.environ["GGTTS_TEST_PAUSE_DIR"])
    _unpaused = _work.ItemWorker.run

    def _pausing_run(self, item):  # type: ignore[no-untyped-def]
        if item.id == _PAUSE_ON:
            reached = _pause_dir / "reached"
            (_pause_dir / "reached.part").write_text(str(os.getpid()))
            (_pause_dir / "reached.part").replace(reached)  # whole when it appears
            while not (_pause_dir / "release").exists():
                time.sleep(0.01)
        return _unpaused(self, item)

    _work.ItemWorker.run = _pausing_run  # type: ignore[method-assign]

_DIE_AFTER = os.environ.get("GGTTS_TEST_DIE_AFTER_ITEM")
if _DIE_AFTER:
    from multiprocessing.connection import Connection

    _send = Connection.send

    def _send_then_die(self, obj):  # type: ignore[no-untyped-def]
        _send(self, obj)
        if isinstance(obj, dict) and obj.get("id") == _DIE_AFTER:  # a record: only workers send those
            os._exit(139)

    Connection.send = _send_then_die  # type: ignore[method-assign]

_RAISE_ON = os.environ.get("GGTTS_TEST_RAISE_ON_ITEM")
if _RAISE_ON:
    import ggtts.batch.work as _work

    _unraised = _work.ItemWorker.run

    def _raising_run(self, item):  # type: ignore[no-untyped-def]
        if item.id == _RAISE_ON and (_ONCE is None or not Path(_ONCE).exists()):
            if _ONCE is not None:
                Path(_ONCE).write_text(str(os.getpid()))
            raise KeyboardInterrupt
        return _unraised(self, item)

    _work.ItemWorker.run = _raising_run  # type: ignore[method-assign]
