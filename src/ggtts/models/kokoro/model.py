"""Kokoro-82M (StyleTTS 2 acoustic model + ISTFTNet vocoder): phoneme ids and a style vector -> 24 kHz audio.

Language-blind: input ids are already mapped through the file's vocabulary. The stages are exposed
separately (``encode_prosody``, ``align``, ``predict_f0_n``, ``encode_text``, ``decode``) so that callers
can chunk or check each one; ``decoder_inputs`` runs those before the decoder, ``forward`` runs them all, and
``decode_fast_start`` decodes in two parts, the first sooner.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn

from ggtts.models.kokoro.albert import Albert
from ggtts.models.kokoro.config import KokoroConfig
from ggtts.models.kokoro.istftnet import Decoder
from ggtts.models.kokoro.prosody import ProsodyPredictor, TextEncoder

# decode_fast_start renders the head this many frames past its end (0.2 s at 40 frames/s), so that its last samples
# and the crossfade after them depend on what follows, not on the zero padding at the window's edge. Enough: with
# the normalisation statistics held fixed, windows with 8 frames of context matched the whole rendering to 1.5e-6
# on the real model.
HEAD_CONTEXT_FRAMES = 8
F0_PER_FRAME = 2  # the predictor's F0 and energy curves run at twice the frame rate
CROSSFADE_S = 0.01  # from the head's own rendering to the whole chunk's, just after the head's end


@dataclass(frozen=True)
class Prosody:
    durations: torch.Tensor  # (T,) long, frames per token
    features: torch.Tensor  # (1, T, hidden + style) duration-encoder output, the input to F0/energy prediction


@dataclass(frozen=True)
class DecoderInputs:
    durations: torch.Tensor  # (T,) long, frames per token
    asr: torch.Tensor  # (1, hidden, frames) aligned text features
    f0: torch.Tensor  # (1, 2 * frames) F0 in Hz
    n: torch.Tensor  # (1, 2 * frames) energy


class KokoroModel(nn.Module):
    def __init__(self, config: KokoroConfig) -> None:
        super().__init__()
        self.config = config
        self.bert = Albert(config)
        self.bert_encoder = nn.Linear(config.plbert_hidden_size, config.hidden_dim)
        self.predictor = ProsodyPredictor(config)
        self.text_encoder = TextEncoder(config)
        self.decoder = Decoder(config)

    # ---- the voice vector's two halves ---------------------------------------------------------------------
    def timbre(self, ref_s: torch.Tensor) -> torch.Tensor:
        """(1, 2 * style) -> (1, style): the half that conditions the decoder."""
        return ref_s[:, : self.config.style_dim]

    def prosodic_style(self, ref_s: torch.Tensor) -> torch.Tensor:
        """(1, 2 * style) -> (1, style): the half that conditions the predictor."""
        return ref_s[:, self.config.style_dim :]

    # ---- stages --------------------------------------------------------------------------------------------
    @torch.inference_mode()
    def encode_prosody(self, input_ids: torch.Tensor, ref_s: torch.Tensor, speed: float = 1.0) -> Prosody:
        """(1, T) ids with BOS/EOS, (1, 2 * style) voice -> frames per token and duration-encoder features."""
        self._check_inputs(input_ids, ref_s)
        d_en = self.bert_encoder(self.bert(input_ids)).transpose(1, 2)  # (1, hidden, T)
        features = self.predictor.text_encoder(d_en, self.prosodic_style(ref_s))
        return Prosody(self.predictor.durations(features, speed), features)

    @staticmethod
    def align(features: torch.Tensor, durations: torch.Tensor) -> torch.Tensor:
        """(1, C, T) per-token features -> (1, C, sum(durations)): each token repeated for its frames."""
        return torch.repeat_interleave(features, durations, dim=2)

    @torch.inference_mode()
    def predict_f0_n(self, prosody: Prosody, ref_s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """F0 (Hz) and energy curves, (1, 2 * frames) each."""
        aligned = self.align(prosody.features.transpose(1, 2), prosody.durations)
        return self.predictor.f0_n(aligned, self.prosodic_style(ref_s))

    @torch.inference_mode()
    def encode_text(self, input_ids: torch.Tensor, durations: torch.Tensor) -> torch.Tensor:
        """(1, T) ids -> (1, hidden, frames) aligned acoustic text features."""
        return self.align(self.text_encoder(input_ids), durations)

    @torch.inference_mode()
    def decoder_inputs(self, input_ids: torch.Tensor, ref_s: torch.Tensor, speed: float = 1.0) -> DecoderInputs:
        """Every stage before the decoder: (1, T) ids with BOS/EOS, (1, 2 * style) voice -> what it decodes."""
        prosody = self.encode_prosody(input_ids, ref_s, speed)
        f0, n = self.predict_f0_n(prosody, ref_s)
        return DecoderInputs(prosody.durations, self.encode_text(input_ids, prosody.durations), f0, n)

    @torch.inference_mode()
    def decode(
        self,
        asr: torch.Tensor,
        f0: torch.Tensor,
        n: torch.Tensor,
        ref_s: torch.Tensor,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Aligned features, F0 and energy -> (1, samples) audio; ``generator`` seeds the source noise."""
        return self.decoder(asr, f0, n, self.timbre(ref_s), generator)

    @torch.inference_mode()
    def decode_fast_start(
        self,
        asr: torch.Tensor,
        f0: torch.Tensor,
        n: torch.Tensor,
        ref_s: torch.Tensor,
        earliest: int,
        latest: int,
        generator: torch.Generator | None = None,
    ) -> Iterator[torch.Tensor]:
        """:meth:`decode`'s audio in two parts, the first after rendering only the head of the chunk.

        The vocoder normalises each channel over the whole chunk (48 AdaIN layers), so no part of its output is
        known before all of it is computed. Here the first ``cut`` frames (the quietest frame boundary, by the
        predicted energy, in ``[earliest, latest]``) are rendered on their own, with their own statistics and
        :data:`HEAD_CONTEXT_FRAMES` frames of what follows, and yielded: (1, cut * samples_per_frame). Then the
        whole chunk is rendered exactly as :meth:`decode` does (same features, same source noise) and the rest is
        yielded from the cut on, its first :data:`CROSSFADE_S` faded over from the head's rendering: from there
        on it equals :meth:`decode`'s output. The head is an approximation (another rendering of the same
        features, as if those frames were the whole chunk); ``benchmarks/kokoro_fast_start.py`` measures it.
        """
        frames = asr.shape[-1]
        if not 0 < earliest <= latest < frames:
            raise ValueError(f"the head must end within the chunk's {frames} frames, not in [{earliest}, {latest}]")
        s = self.timbre(ref_s)
        vocoder = self.decoder.generator
        x = self.decoder.features(asr, f0, n, s)  # (1, C, 2 * frames)
        har = vocoder.source_spectrum(f0, generator)  # the same draws as decode()'s
        energy = n.reshape(frames, -1).mean(dim=1)  # (frames,) predicted energy per frame
        cut = earliest + int(torch.argmin(energy[earliest : latest + 1]))
        rate = x.shape[-1] // frames  # vocoder input frames per frame
        k = min(frames, cut + HEAD_CONTEXT_FRAMES) * rate
        # contiguous copies, as decode() passes: compiled code would otherwise compile again for the views' strides
        head = vocoder.render(
            x[..., :k].contiguous(), s, har[..., : k * vocoder.spectrum_frames_per_frame + 1].contiguous()
        )
        at = cut * self.samples_per_frame
        yield head[:, :at]
        whole = vocoder.render(x, s, har)
        fade = min(round(CROSSFADE_S * self.config.sample_rate), head.shape[-1] - at)
        steps = torch.arange(fade, dtype=whole.dtype, device=whole.device)
        ramp = 0.5 - 0.5 * torch.cos(torch.pi * (steps + 0.5) / fade)
        rest = whole[:, at:].clone()
        rest[:, :fade] = torch.lerp(head[:, at : at + fade], whole[:, at : at + fade], ramp)
        yield rest

    @property
    def samples_per_frame(self) -> int:
        """Audio samples per frame of the durations (the F0 curve has two values per frame)."""
        return F0_PER_FRAME * self.config.upsample_factor

    @torch.inference_mode()
    def forward(
        self,
        input_ids: torch.Tensor,
        ref_s: torch.Tensor,
        speed: float = 1.0,
        generator: torch.Generator | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(1, T) ids with BOS/EOS, (1, 2 * style) voice row -> audio (samples,) and frames per token (T,)."""
        inputs = self.decoder_inputs(input_ids, ref_s, speed)
        audio = self.decode(inputs.asr, inputs.f0, inputs.n, ref_s, generator)
        return audio.squeeze(0), inputs.durations

    def _check_inputs(self, input_ids: torch.Tensor, ref_s: torch.Tensor) -> None:
        if input_ids.dim() != 2 or input_ids.shape[0] != 1:
            raise ValueError(f"input_ids must have shape (1, T), got {tuple(input_ids.shape)}")
        if input_ids.shape[1] > self.config.context_length:
            raise ValueError(f"{input_ids.shape[1]} tokens exceed the context length {self.config.context_length}")
        if ref_s.shape != (1, 2 * self.config.style_dim):
            raise ValueError(f"ref_s must have shape (1, {2 * self.config.style_dim}), got {tuple(ref_s.shape)}")
