"""Decode audio codes in overlapping windows while they are still being generated.

A non-causal code decoder (WavTokenizer: convolutions, GroupNorm and attention over the whole sequence) needs
context on both sides. Each chunk of ``chunk`` codes is decoded together with up to ``left`` earlier codes and
``lookahead`` later ones, and only the chunk's own ``hop`` samples per code are kept, so the pieces
concatenate to
exactly ``hop * n_codes`` samples. The result differs slightly from a one-shot decode (normalisation and
attention
see a window instead of everything); the pipeline's tests measure by how much.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch

DecodeFn = Callable[[torch.Tensor], torch.Tensor]  # codes (1, T) -> audio (1, T * hop)

DEFAULT_CHUNK = 40  # codes handed out per window
DEFAULT_LEFT = 24  # earlier codes decoded with each window, for context
DEFAULT_LOOKAHEAD = 8  # later codes waited for (and decoded) before a window is handed out


class WindowedDecoder:
    def __init__(
        self,
        decode: DecodeFn,
        hop: int,
        *,
        chunk: int = DEFAULT_CHUNK,
        left: int = DEFAULT_LEFT,
        lookahead: int = DEFAULT_LOOKAHEAD,
    ) -> None:
        if chunk < 1 or left < 0 or lookahead < 0:
            raise ValueError("chunk must be >= 1 and the contexts >= 0")
        self.decode, self.hop = decode, hop
        self.chunk, self.left, self.lookahead = chunk, left, lookahead
        self.codes: list[int] = []
        self.emitted = 0  # codes whose audio has been handed out

    def _window(self, end: int) -> torch.Tensor:
        lo = max(0, self.emitted - self.left)
        hi = min(len(self.codes), end + self.lookahead)
        audio = self.decode(torch.tensor([self.codes[lo:hi]], dtype=torch.long))[0]
        start = (self.emitted - lo) * self.hop
        out = audio[start : start + (end - self.emitted) * self.hop]
        self.emitted = end
        return out

    def push(self, codes: list[int]) -> Iterator[torch.Tensor]:
        """Add codes; yield audio for every chunk whose lookahead is now available."""
        self.codes.extend(codes)
        while len(self.codes) - self.emitted >= self.chunk + self.lookahead:
            yield self._window(self.emitted + self.chunk)

    def flush(self) -> Iterator[torch.Tensor]:
        """Yield the audio of every code not handed out yet (call once generation has ended)."""
        while self.emitted < len(self.codes):
            yield self._window(min(len(self.codes), self.emitted + self.chunk))
