"""A process that exits while a lane loop is stepping ends cleanly: the loop's utterances are given up and its
thread ended at exit, before the interpreter stops its daemon threads. Stopped as it next takes the GIL inside
torch's C++ (freeing a tensor), the thread aborted the process ("terminate called without an active exception",
exit status 134: seen in 3 runs of 3 with the step below, and in 2 of 5 after a Magpie ``parallel=2`` synthesis)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

BUSY_AT_EXIT = textwrap.dedent(
    """
    import threading, time
    import torch
    from ggtts.runtime.lanes import LaneLoop

    started = threading.Event()

    class Lane:
        done = False

    class Busy:  # a step that computes with torch for a second
        def __init__(self):
            self.lanes = []
        def join(self, work):
            self.lanes.append(Lane())
            return self.lanes[-1]
        def remove(self, lane):
            if lane in self.lanes:
                self.lanes.remove(lane)
        def step(self):
            started.set()
            end = time.perf_counter() + 1.0
            while time.perf_counter() < end:
                a = torch.randn(300, 300)
                (a @ a).sum()
            return [(lane, None) for lane in self.lanes]

    class Work:
        def on_frame(self, frame):
            return []
        def on_end(self):
            return []

    outputs = LaneLoop(Busy(), 2).run(Work)
    started.wait()
    print("exiting in a step", flush=True)
    """
)


def test_a_process_exiting_while_a_lane_loop_steps_ends_cleanly() -> None:
    env = {**os.environ, "GGML_NO_BACKTRACE": "1"}  # (ggml's abort handler would attach gdb for a backtrace)
    result = subprocess.run([sys.executable, "-c", BUSY_AT_EXIT], capture_output=True, text=True, timeout=120, env=env)
    assert "exiting in a step" in result.stdout
    assert result.returncode == 0, result.stderr[-2000:]
    assert "terminate called" not in result.stderr
