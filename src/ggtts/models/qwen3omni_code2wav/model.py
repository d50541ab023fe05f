"""Qwen3-Omni code2wav: 16 codebooks of codes per 80 ms frame -> 24 kHz waveform.

codes ``(B, Q, N)`` -> mean of Q code embeddings ``(B, N, hidden)`` -> sliding-window transformer -> upsampling
stages (transposed conv + ConvNeXt, x4 for the published ratios) -> input conv -> decoder blocks (SnakeBeta,
transposed conv, residual units; x480) -> SnakeBeta -> output conv -> clamp to [-1, 1].

Output length (as transformers'): ``N * total_upsample - trailing_lag`` samples, ``N * 1920 - 555`` for the
published model (:meth:`Code2WavConfig.output_length`). Every layer is causal but each decoder block's transposed
convolution, whose last samples need the next frame: those are left out, not guessed. So the audio of N frames is
a prefix of the audio of N + 1 frames, and :class:`Code2WavStream` yields exactly the one-shot samples as frames
arrive. Upstream's :meth:`Code2Wav.chunked_decode` does not: each chunk loses its last ``trailing_lag`` samples
(a gap at every chunk boundary) and the transformer sees only ``left_context_size`` frames of the past.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import nn

from ggtts.errors import InputError
from ggtts.gguf import GGUFFile
from ggtts.gguf.keys import Qwen3OmniCode2Wav as K
from ggtts.models.layers.channels_last import channels_last, channels_last_convolutions, laid_out
from ggtts.models.layers.gguf_state import empty_modules, load_module_from_gguf
from ggtts.models.qwen3omni_code2wav.config import Code2WavConfig
from ggtts.models.qwen3omni_code2wav.layers import (
    DECODER_KERNEL,
    CausalConvNet,
    DecoderBlock,
    SnakeBeta,
    StreamState,
    UpsampleStage,
)
from ggtts.models.qwen3omni_code2wav.transformer import TransformerModel
from ggtts.ops.precision import dtype_of

if TYPE_CHECKING:
    from ggtts.models.qwen3omni_code2wav.static_stream import StaticDecoderStreams

CLAMP = (-1.0, 1.0)
DEFAULT_CHUNK_SIZE = 300  # frames: upstream chunked_decode's defaults
DEFAULT_LEFT_CONTEXT = 25


def check_codes(codes: torch.Tensor, codebooks: int, codebook_size: int, what: str) -> None:
    """InputError unless ``codes`` is an integer ``(batch, codebooks, frames)`` tensor with codes below
    ``codebook_size``; ``what`` names the decoder in the message."""
    if codes.dtype.is_floating_point or codes.dtype.is_complex or codes.dtype == torch.bool:
        raise InputError(f"audio codes must be integers, not {codes.dtype}")
    if codes.dim() != 3:
        raise InputError(f"audio codes have shape {list(codes.shape)}; expected (batch, codebooks, frames)")
    if codes.shape[1] != codebooks:
        raise InputError(
            f"audio codes have {codes.shape[1]} codebooks (shape {list(codes.shape)}); {what} decodes {codebooks}"
        )
    bad = (codes < 0) | (codes >= codebook_size)
    if codes.numel() and bool(bad.any()):
        where = bad.nonzero()[0].tolist()
        raise InputError(
            f"audio code {int(codes[tuple(where)])} at {where} is out of range: {what} has codes 0..{codebook_size - 1}"
        )


class StreamingDecoder(nn.Module):
    """A decoder of frames of codes whose every layer streams (:meth:`run` with a state): :meth:`forward` decodes
    all frames at once, :meth:`stream` frame by frame with the same samples (Qwen3-Omni's code2wav, Qwen3-TTS's
    12 Hz decoder)."""

    static: StaticDecoderStreams | None = None  # use_static_streams

    def __getstate__(self) -> dict[str, object]:
        """Copies and pickles leave the fixed-tensor streams behind (their graphs read this decoder's tensors): a
        copy makes its own, of the same settings."""
        state = dict(super().__getstate__())
        static: StaticDecoderStreams | None = state.pop("static", None)  # type: ignore[assignment]
        if static is not None:
            state["_static_settings"] = (static.codebooks, static.sizes, static.capture, static.streams)
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        settings = state.pop("_static_settings", None)
        super().__setstate__(state)
        if isinstance(settings, tuple):
            self.use_static_streams(*settings)

    @property
    def device(self) -> torch.device:
        raise NotImplementedError

    def check_codes(self, codes: torch.Tensor) -> None:
        raise NotImplementedError

    def run(self, codes: torch.Tensor, start: int | torch.Tensor = 0, state: StreamState | None = None) -> torch.Tensor:
        """The layers, without checks: codes ``(B, Q, N)`` at frame ``start`` -> ``(B, 1, samples)``."""
        raise NotImplementedError

    @torch.inference_mode()
    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        """Codes ``(B, Q, N)`` -> float audio ``(B, 1, samples)``, as upstream's forward."""
        self.check_codes(codes)
        if codes.shape[-1] == 0:
            return torch.zeros(codes.shape[0], 1, 0, device=self.device)
        return self.run(codes)

    def stream(self) -> Code2WavStream:
        """A stream from the start (one that can be forked and saved: see :meth:`fresh_stream` for one that
        cannot)."""
        return Code2WavStream(self)

    def use_static_streams(self, codebooks: int, sizes: Sequence[int], capture: bool = True, streams: int = 1) -> None:
        """From now on :meth:`fresh_stream` decodes over fixed tensors, each push made of pushes of ``sizes`` frames
        (1 among them), each a replayed CUDA graph where the decoder is on CUDA and ``capture``
        (:mod:`ggtts.models.qwen3omni_code2wav.static_stream`; eagerly elsewhere: what the CPU tests run);
        ``streams`` at once (a lane loop's lanes)."""
        from ggtts.models.qwen3omni_code2wav.static_stream import StaticDecoderStreams

        self.static = StaticDecoderStreams(self, codebooks, sizes, capture, streams)

    def going_on(self, stream: Code2WavStream) -> Code2WavStream:
        """A stream going on from where ``stream`` is (which is left as it is, e.g. a decoder primed with a cloned
        voice's recording): over fixed tensors after :meth:`use_static_streams`, else ``stream``'s fork."""
        if self.static is not None:
            return self.static.continued(stream)
        return stream.fork()

    def fresh_stream(self) -> Code2WavStream:
        """A stream from the start that is only pushed (not forked or saved): over fixed tensors after
        :meth:`use_static_streams` (as many at once as it was given; :meth:`Code2WavStream.close` gives them back),
        else :meth:`stream`'s."""
        if self.static is not None:
            from ggtts.models.qwen3omni_code2wav.static_stream import StaticDecoderStream

            return StaticDecoderStream(self.static)
        return self.stream()


class Code2Wav(StreamingDecoder):
    def __init__(self, cfg: Code2WavConfig) -> None:
        super().__init__()
        self.cfg = cfg
        h, n_blocks = cfg.hidden_size, len(cfg.upsample_rates)
        self.code_embedding = nn.Embedding(cfg.codebook_size * cfg.num_quantizers, h)
        self.pre_transformer = TransformerModel(cfg)
        self.upsample = nn.ModuleList(UpsampleStage(h, r) for r in cfg.upsampling_ratios)
        self.decoder = nn.ModuleList(
            [
                CausalConvNet(h, cfg.decoder_dim, DECODER_KERNEL),
                *(
                    DecoderBlock(cfg.decoder_width(i), cfg.decoder_width(i + 1), rate)
                    for i, rate in enumerate(cfg.upsample_rates)
                ),
                SnakeBeta(cfg.decoder_width(n_blocks)),
                CausalConvNet(cfg.decoder_width(n_blocks), 1, DECODER_KERNEL),
            ]
        )
        self.decoder_channels_last = False  # prepare() turns it on
        self.precision = "float32"

    @classmethod
    def from_gguf(
        cls,
        gguf: GGUFFile,
        device: str | torch.device = "cpu",
        *,
        stored_weights: bool = True,
        precision: str = "float32",
    ) -> Code2Wav:
        """Code2wav from a ``qwen3omni-talker`` file (the talker's tensors beside it are left alone). Linear and
        embedding weights stored as F16/BF16/Q8_0 stay so on CPU where ggml's kernels are installed; the rest are
        widened to float32."""
        from ggtts.ops.stored_weights import stored_weights_plan, use_planned_weights

        cfg = Code2WavConfig.from_gguf(gguf)
        with empty_modules():
            model = cls(cfg)
        plan = stored_weights_plan(device, stored_weights)
        consumed = use_planned_weights(plan, model, gguf, gguf_name=K.tensor_name)
        others = {n for n in gguf.names() if not n.startswith(K.PREFIX)}  # the talker's
        load_module_from_gguf(model, gguf, gguf_name=K.tensor_name, ignore=consumed | others, device=device)
        return model.eval().prepare(precision)

    @property
    def device(self) -> torch.device:
        return self.pre_transformer.norm.weight.device

    def check_codes(self, codes: torch.Tensor) -> None:
        """InputError unless ``codes`` is an integer ``(batch, codebooks, frames)`` tensor of this model's
        codebook count and code range."""
        check_codes(codes, self.cfg.num_quantizers, self.cfg.codebook_size, "code2wav")

    def embed(self, codes: torch.Tensor) -> torch.Tensor:
        """Codes ``(B, Q, N)`` -> the mean of each frame's code embeddings ``(B, N, hidden)``."""
        q = self.cfg.num_quantizers
        offset = torch.arange(q, device=codes.device).view(1, q, 1) * self.cfg.codebook_size
        return self.code_embedding(codes.to(torch.long) + offset).mean(1)  # (B, Q, N, hidden) -> (B, N, hidden)

    def run(self, codes: torch.Tensor, start: int | torch.Tensor = 0, state: StreamState | None = None) -> torch.Tensor:
        """The layers, without checks: codes ``(B, Q, N)`` at frame ``start`` -> ``(B, 1, samples)``."""
        x = self.pre_transformer(self.embed(codes.to(self.device)), start, state).transpose(1, 2)  # (B, hidden, N)
        for stage in self.upsample:
            x = stage(x, state)
        if self.decoder_channels_last:
            x = channels_last(x)  # (B, C, 1, T), time-major
        for layer in self.decoder:
            x = layer(x, state)
        return x.reshape(x.shape[0], 1, -1).clamp(*CLAMP)

    def prepare(self, precision: str = "float32") -> Code2Wav:
        """Run the decoder in channels-last layout (:mod:`.layers`): call once the weights are in place.
        ``precision="bfloat16"``: its convolutions (but the output one) multiply in bfloat16, where the CPU does
        so natively (AVX-512 BF16, AMX): about twice as fast, no longer float32 arithmetic (parity with upstream
        holds in float32; ``benchmarks/bench_qwen3omni.py`` reports the difference)."""
        # the name, not the device: tests run it where bfloat16 is emulated
        channels_last_convolutions(self.decoder, dtype_of(precision), keep=(self.decoder[-1],))
        self.decoder_channels_last = True
        self.precision = precision
        return self

    def chunked_decode(
        self, codes: torch.Tensor, chunk_size: int = DEFAULT_CHUNK_SIZE, left_context_size: int = DEFAULT_LEFT_CONTEXT
    ) -> torch.Tensor:
        """Upstream's chunked decoding, sample for sample: chunks of ``chunk_size`` frames, each decoded one-shot
        after up to ``left_context_size`` frames of context whose audio is then cut. Each chunk but the last is
        ``trailing_lag`` samples short, so the result is ``(chunks - 1) * trailing_lag`` samples shorter than
        :meth:`forward`'s (which :class:`Code2WavStream` reproduces instead)."""
        if chunk_size < 1 or left_context_size < 0:
            raise InputError(
                f"chunk_size must be at least 1 and left_context_size at least 0, not {chunk_size} and "
                f"{left_context_size}"
            )
        self.check_codes(codes)
        hop, pieces, start = self.cfg.total_upsample, [], 0
        while start < codes.shape[-1]:
            end = min(start + chunk_size, codes.shape[-1])
            context = left_context_size if start - left_context_size > 0 else start
            pieces.append(self(codes[..., start - context : end])[..., context * hop :])
            start = end
        return torch.cat(pieces, dim=-1) if pieces else self(codes)


class Code2WavStream:
    """Incremental decoding for first audio early: ``push`` new frames ``(B, Q, n)``, get the samples they settle
    ``(B, 1, m)``. Each attention layer keeps the last ``sliding_window - 1`` keys and values, each causal
    convolution its past inputs, each transposed convolution its overlap, so a push costs about what its own frames
    cost one-shot, and the pushes' audio joined is :meth:`Code2Wav.forward`'s on all frames (float rounding
    apart). The first push settles ``n * hop - trailing_lag`` samples, each later one ``n * hop``."""

    def __init__(self, model: StreamingDecoder) -> None:
        self.model = model
        self.frames = 0  # pushed so far
        self._state: StreamState = {}
        self._shape: torch.Size | None = None

    @torch.inference_mode()
    def fork(self) -> Code2WavStream:
        """A stream going on from here, apart from this one (a decoder primed once with a voice's recording, then
        forked for each utterance)."""
        other = Code2WavStream(self.model)
        other.frames, other._shape = self.frames, self._shape
        other._state = {layer: value.clone() for layer, value in self._state.items()}
        return other

    def saved(self) -> dict[str, torch.Tensor]:
        """What the stream holds (each layer's past inputs, spill, or keys and values), by the layer's name in the
        model, in float32: to store, and :meth:`resumed` later."""
        names = {module: name for name, module in self.model.named_modules()}
        return {names[layer]: value.detach().float().contiguous() for layer, value in self._state.items()}

    @classmethod
    def resumed(
        cls, model: StreamingDecoder, frames: int, shape: torch.Size, saved: dict[str, torch.Tensor]
    ) -> Code2WavStream:
        """A stream going on after ``frames`` frames of codes of ``shape`` (``(B, Q)``), from :meth:`saved`'s
        tensors; a name that is not one of the model's layers is a ValueError (the shapes are checked by the first
        push, which fails on a mismatch)."""
        layers = dict(model.named_modules())
        unknown = sorted(set(saved) - set(layers))
        if unknown or frames < 1:
            raise ValueError(f"not this decoder's state: {unknown[0] if unknown else f'{frames} frames'}")
        stream = cls(model)
        stream.frames, stream._shape = frames, shape
        stream._state = {layers[name]: laid_out(value.to(model.device)) for name, value in saved.items()}
        return stream

    @torch.inference_mode()
    def push(self, codes: torch.Tensor) -> torch.Tensor:
        model = self.model
        model.check_codes(codes)
        if self._shape is not None and self._shape != codes.shape[:-1]:
            raise InputError(f"pushed codes of shape {list(codes.shape)} after codes of shape {list(self._shape)}")
        self._shape = codes.shape[:-1]
        if codes.shape[-1] == 0:
            return torch.zeros(codes.shape[0], 1, 0, device=model.device)
        audio = self._decode(codes)
        self.frames += codes.shape[-1]
        return audio

    def close(self) -> None:
        """No more pushes: what the stream holds of its decoder's (a static stream's fixed tensors) is free for
        another stream. Nothing for an ordinary stream."""

    def _decode(self, codes: torch.Tensor) -> torch.Tensor:
        """The samples of ``codes`` (checked, at least one frame) after the :attr:`frames` pushed so far."""
        return self.model.run(codes, self.frames, self._state)
