"""A decode step captured once as a CUDA graph and replayed: gpt-fast's and faster-qwen3-tts's way past the
launch overhead of small kernels.

A model's step that reads its inputs from tensors in fixed places (a token id, a position: see
:class:`~ggtts.models.layers.transformer.StaticPosition`) and writes into a fixed cache has the same kernels,
shapes and addresses at every step. :class:`StepGraph` runs such a step eagerly twice on a side stream (CUDA's
rule before a capture; the writes are the step's own, so running it again is harmless), captures it, and from then
on replays it: one launch for the whole step instead of hundreds. Off CUDA (or with ``capture=False``) it simply
calls the step, so the CPU tests run the very code the graph holds.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

import torch

T = TypeVar("T")
WARMUP_RUNS = 2
_CAPTURES = threading.RLock()


class StepGraph(Generic[T]):
    """``step()`` (no arguments: it reads fixed tensors) as a replayed CUDA graph where ``device`` is CUDA."""

    def __init__(self, step: Callable[[], T], device: torch.device, capture: bool = True) -> None:
        self.step, self.device = step, device
        self.capture = capture and device.type == "cuda"
        self.graph: torch.cuda.CUDAGraph | None = None
        self.out: T | None = None

    @property
    def captured(self) -> bool:
        return self.graph is not None

    def __call__(self) -> T:
        if not self.capture:
            return self.step()
        if self.graph is None:
            self._capture()
        assert self.graph is not None and self.out is not None
        self.graph.replay()
        return self.out

    def _capture(self) -> None:
        # one capture at a time in the process (a server's copies of a model capture on their own threads), on the
        # graph's own device and a stream of its own
        with _CAPTURES, torch.cuda.device(self.device):
            side = torch.cuda.Stream(self.device)
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                for _ in range(WARMUP_RUNS):
                    self.step()
            torch.cuda.current_stream(self.device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            capture = torch.cuda.Stream(self.device)
            with torch.cuda.graph(graph, stream=capture, capture_error_mode="thread_local"):  # others' work goes on
                self.out = self.step()
        self.graph = graph
