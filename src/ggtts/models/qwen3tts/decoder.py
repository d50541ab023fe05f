"""Qwen3-TTS's 12 Hz speech decoder: 16 codebooks of codes per 80 ms frame -> 24 kHz audio.

codes ``(B, Q, N)`` -> the split quantizer's decoding (the first codebook through its output projection, the
rest summed and through theirs) ``(B, codebook_dim, N)`` -> a causal convolution to ``latent_dim`` -> the
sliding-window transformer (Qwen3-Omni's code2wav transformer, between an input and an output projection) ->
upsampling stages (transposed conv + ConvNeXt) -> DAC decoder blocks -> SnakeBeta -> output conv -> clamp.

Unlike Qwen3-Omni's code2wav, each transposed convolution trims only its end, so N frames give exactly
``N * total_upsample`` samples, and (every layer being causal) the audio of N frames is a prefix of the audio of
N + 1: :meth:`~StreamingDecoder.stream` yields one-shot decoding's samples frame by frame, exactly (float rounding
apart).
Module names map to llama.cpp's mmproj names by :func:`wav_name`.
"""

from __future__ import annotations

import re

import torch
from torch import nn

from ggtts.gguf import GGUFFile
from ggtts.gguf.keys import Qwen3TTS as K
from ggtts.models.layers.channels_last import channels_last, channels_last_convolutions
from ggtts.models.layers.gguf_state import empty_modules, load_module_from_gguf
from ggtts.models.qwen3omni_code2wav.layers import (
    DECODER_KERNEL,
    CausalConvNet,
    DecoderBlock,
    FoldedSnakeBeta,
    StreamState,
    UpsampleStage,
)
from ggtts.models.qwen3omni_code2wav.model import StreamingDecoder, check_codes
from ggtts.models.qwen3omni_code2wav.transformer import TransformerModel
from ggtts.models.qwen3tts.config import DecoderConfig
from ggtts.ops.precision import dtype_of

PRE_CONV_KERNEL = 3
CLAMP = (-1.0, 1.0)

_RULES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(p), r)
    for p, r in (
        (r"^(pre_conv|dac\.entry|dac\.post_conv)\.conv\.", r"\1."),
        (r"^tfm\.layers\.(\d+)\.(.+)$", "tfm.blk.{layer}"),
        (r"^tfm\.norm\.", "tfm.output_norm."),
        (r"^up\.blk\.(\d+)\.(.+)$", "up.blk.{up}"),
        (r"^dac\.blk\.(\d+)\.block\.0\.", r"dac.blk.\1.snake."),
        (r"^dac\.blk\.(\d+)\.block\.1\.conv\.", r"dac.blk.\1.conv."),
        (r"^dac\.blk\.(\d+)\.block\.(\d)\.(act\d)\.", "dac.blk.{unit_act}"),
        (r"^dac\.blk\.(\d+)\.block\.(\d)\.(conv\d)\.conv\.", "dac.blk.{unit_conv}"),
    )
]


def wav_name(module_name: str) -> str:
    """The mmproj's name of a :class:`SpeechDecoder` parameter."""
    for pattern, repl in _RULES:
        m = pattern.match(module_name)
        if not m:
            continue
        rest = module_name[m.end() :]
        if repl == "tfm.blk.{layer}":
            return f"{K.WAV}.tfm.blk.{m[1]}.{K.WAV_LAYER[m[2]]}"
        if repl == "up.blk.{up}":
            return f"{K.WAV}.up.blk.{m[1]}.{K.WAV_UPSAMPLE[m[2]]}"
        if repl == "dac.blk.{unit_act}":
            return f"{K.WAV}.dac.blk.{m[1]}.res.{int(m[2]) - 2}.{m[3]}.{rest}"
        if repl == "dac.blk.{unit_conv}":
            return f"{K.WAV}.dac.blk.{m[1]}.res.{int(m[2]) - 2}.{m[3]}.{rest}"
        return f"{K.WAV}.{pattern.sub(repl, module_name)}"
    return f"{K.WAV}.{module_name}"


STATE_FORMAT = "1"  # what a stored decoder state holds (Code2WavStream.saved) and how its layers are named
_EDGE = 4096  # bytes hashed at each end of each tensor


def fingerprint(gguf: GGUFFile) -> str:
    """A short hash of a decoder: every ``a.gen.wav.*`` tensor's name, shape, type and the bytes at both ends of its
    data (a re-conversion or another checkpoint changes them; reading all ~100 MB would cost each load), and the
    state format. A voice file's stored decoder state is taken only by the decoder that made it."""
    import hashlib

    digest = hashlib.sha256(STATE_FORMAT.encode())
    for name in sorted(n for n in gguf.names() if n.startswith(K.WAV + ".")):
        info, raw = gguf.info(name), gguf.raw(name).reshape(-1).view("uint8")
        digest.update(f"{name}:{info.shape}:{info.type.name}".encode())
        digest.update(raw[:_EDGE].tobytes() + raw[-_EDGE:].tobytes())
    return digest.hexdigest()[:32]


class Codebooks(nn.Module):
    """One codebook ``(codes, dim)`` or a stack ``(n, codes, dim)``, already divided by usage counts."""

    def __init__(self, n: int, size: int, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n, size, dim) if n > 1 else torch.zeros(size, dim))


class QuantizerPart(nn.Module):
    def __init__(self, n: int, size: int, dim: int, out_dim: int) -> None:
        super().__init__()
        self.in_proj = nn.Linear(out_dim, dim, bias=False)  # the encoder's (kept for the file's sake)
        self.out_proj = nn.Linear(dim, out_dim, bias=False)
        self.codebook = Codebooks(n, size, dim)

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """Codes ``(B, n, N)`` -> ``(B, N, out_dim)``."""
        books = self.codebook.weight
        if books.dim() == 2:
            summed = nn.functional.embedding(codes[:, 0], books)
        else:
            summed = torch.stack([nn.functional.embedding(codes[:, i], books[i]) for i in range(books.shape[0])]).sum(0)
        return self.out_proj(summed)


class Quantizer(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        half = cfg.codebook_dim // 2
        self.first = QuantizerPart(1, cfg.codebook_size, half, cfg.codebook_dim)
        self.rest = QuantizerPart(cfg.num_quantizers - 1, cfg.codebook_size, half, cfg.codebook_dim)

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        return self.first.decode(codes[:, :1]) + self.rest.decode(codes[:, 1:])


class Transformer(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.in_proj = nn.Linear(cfg.latent_dim, cfg.hidden_size)
        self.out_proj = nn.Linear(cfg.hidden_size, cfg.latent_dim)
        self.model = TransformerModel(cfg)

    @property
    def layers(self) -> nn.ModuleList:
        return self.model.layers

    def forward(self, x: torch.Tensor, start: int | torch.Tensor = 0, state: StreamState | None = None) -> torch.Tensor:
        return self.out_proj(self.model(self.in_proj(x), start, state))


class Upsampling(nn.Module):
    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.blk = nn.ModuleList(UpsampleStage(cfg.latent_dim, r, trim_left=False) for r in cfg.upsampling_ratios)


class Dac(nn.Module):
    """The DAC-style decoder: an input convolution, the upsampling blocks, SnakeBeta, the output convolution."""

    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        n_blocks = len(cfg.upsample_rates)
        self.entry = CausalConvNet(cfg.latent_dim, cfg.decoder_dim, DECODER_KERNEL)
        self.blk = nn.ModuleList(
            DecoderBlock(cfg.decoder_width(i), cfg.decoder_width(i + 1), rate, trim_left=False, snake=FoldedSnakeBeta)
            for i, rate in enumerate(cfg.upsample_rates)
        )
        self.post_snake = FoldedSnakeBeta(cfg.decoder_width(n_blocks))
        self.post_conv = CausalConvNet(cfg.decoder_width(n_blocks), 1, DECODER_KERNEL)


class SpeechDecoder(StreamingDecoder):
    def __init__(self, cfg: DecoderConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.quant = Quantizer(cfg)
        self.pre_conv = CausalConvNet(cfg.codebook_dim, cfg.latent_dim, PRE_CONV_KERNEL)
        self.tfm = Transformer(cfg)
        self.up = Upsampling(cfg)
        self.dac = Dac(cfg)
        self.precision = "float32"

    @classmethod
    def from_gguf(cls, gguf: GGUFFile, device: str | torch.device = "cpu", precision: str = "float32") -> SpeechDecoder:
        """The decoder of a Qwen3-TTS mmproj file (its other tensors are left alone); weights widened to float32,
        the DAC part in channels-last layout (:meth:`prepare`)."""
        cfg = DecoderConfig.from_gguf(gguf)
        with empty_modules():
            model = cls(cfg)
        # the transformer's layers are under tfm.model.layers; llama.cpp's names drop the ".model"
        others = {n for n in gguf.names() if not n.startswith(K.WAV + ".")}
        load_module_from_gguf(model, gguf, gguf_name=lambda n: wav_name(n.replace("tfm.model.", "tfm.")),
                              ignore=others, device=device)  # fmt: skip
        return model.eval().prepare(precision)

    def prepare(self, precision: str = "float32") -> SpeechDecoder:
        """Run the DAC part (where nearly all the time goes: 96-1536 channels at up to 24 kHz) in channels-last
        layout, as Qwen3-Omni's code2wav; ``precision="bfloat16"``: its convolutions (but the output one) multiply
        in bfloat16, where the CPU does so natively (AVX-512 BF16, AMX; parity with upstream holds in float32)."""
        channels_last_convolutions(self.dac, dtype_of(precision), keep=(self.dac.post_conv,))
        self.precision = precision
        return self

    @property
    def device(self) -> torch.device:
        return self.pre_conv.conv.weight.device

    def check_codes(self, codes: torch.Tensor) -> None:
        check_codes(codes, self.cfg.num_quantizers, self.cfg.codebook_size, "the speech decoder")

    def run(self, codes: torch.Tensor, start: int | torch.Tensor = 0, state: StreamState | None = None) -> torch.Tensor:
        """Codes ``(B, Q, N)`` at frame ``start`` -> ``(B, 1, N * total_upsample)``, without checks."""
        codes = codes.to(self.device, torch.long)
        x = self.quant.decode(codes).transpose(1, 2)  # (B, codebook_dim, N)
        x = self.pre_conv(x, state).transpose(1, 2)  # (B, N, latent)
        x = self.tfm(x, start, state).transpose(1, 2)  # (B, latent, N)
        for stage in self.up.blk:
            x = stage(x, state)
        x = self.dac.entry(channels_last(x), state)  # (B, C, 1, T)
        for block in self.dac.blk:
            x = block(x, state)
        x = self.dac.post_conv(self.dac.post_snake(x, state), state)
        return x.reshape(x.shape[0], 1, -1).clamp(*CLAMP)
