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

from collections.abc import Callable, Iterator, Sequence

import torch

# codes (1, T) for one codebook, (1, Q, T) for frames of Q codebooks -> audio (1, T * hop)
DecodeFn = Callable[[torch.Tensor], torch.Tensor]

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
        codebooks: int = 1,
    ) -> None:
        """``codebooks``: 1 for a stream of codes, Q for frames of Q codes (a causal codec takes ``lookahead=0``)."""
        if chunk < 1 or left < 0 or lookahead < 0 or codebooks < 1:
            raise ValueError("chunk and codebooks must be >= 1 and the contexts >= 0")
        self.decode, self.hop = decode, hop
        self.chunk, self.left, self.lookahead, self.codebooks = chunk, left, lookahead, codebooks
        self.codes: list[Sequence[int]] | list[int] = []
        self.emitted = 0  # codes (frames) whose audio has been handed out

    def _window(self, end: int) -> torch.Tensor:
        lo = max(0, self.emitted - self.left)
        hi = min(len(self.codes), end + self.lookahead)
        window = torch.tensor([self.codes[lo:hi]], dtype=torch.long)  # (1, T) or (1, T, Q)
        if self.codebooks > 1:
            window = window.transpose(1, 2)  # (1, Q, T)
        audio = self.decode(window)[0]
        start = (self.emitted - lo) * self.hop
        out = audio[start : start + (end - self.emitted) * self.hop]
        self.emitted = end
        return out

    def push(self, codes: Sequence[int] | Sequence[Sequence[int]]) -> Iterator[torch.Tensor]:
        """Add codes (frames of ``codebooks`` codes); yield audio for every chunk whose lookahead is available."""
        for code in codes:
            if self.codebooks > 1 and (isinstance(code, int) or len(code) != self.codebooks):
                raise ValueError(f"each frame must have {self.codebooks} codes, got {code!r}")
        self.codes.extend(codes)  # type: ignore[arg-type]
        while len(self.codes) - self.emitted >= self.chunk + self.lookahead:
            yield self._window(self.emitted + self.chunk)

    def flush(self) -> Iterator[torch.Tensor]:
        """Yield the audio of every code not handed out yet (call once generation has ended)."""
        while self.emitted < len(self.codes):
            yield self._window(min(len(self.codes), self.emitted + self.chunk))
