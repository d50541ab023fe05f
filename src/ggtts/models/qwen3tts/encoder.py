"""Qwen3-TTS's 12 Hz speech tokenizer's encoder (Base checkpoints; the in-context voice prompt): 24 kHz audio ->
16 codebooks of codes per 80 ms frame, the codes the talker and the decoder speak in.

It is Mimi's encoder (transformers' ``MimiModel.encode``, which qwen-tts's ``Qwen3TTSTokenizerV2Encoder``
subclasses): a SEANet convolution stack (an input convolution; per stride a residual block of ELU + dilated
convolution + ELU + 1x1 convolution, then ELU and a strided convolution; ELU and an output convolution), every
convolution causal (left padding ``kernel - stride``, right padding up to a whole stride, zeros); a causal
transformer with a sliding window (LayerNorm, RoPE, layer scale, GELU MLP) at 25 Hz; a strided convolution down to
12.5 Hz padded by replication; then the split residual quantizer's encoding: the first codebook from the semantic
part's projection, the rest from the acoustic part's, each the nearest codebook entry (``torch.cdist``, as
upstream) to what the earlier codebooks left. Upstream keeps the first ``encoder_valid_num_quantizers`` (16) of
Mimi's 32 codebooks and the first ``ceil(samples / 1920)`` frames. The window is applied as transformers 5's Mimi
applies it; transformers 4.57's (which qwen-tts pins) ignores it under eager and SDPA attention, so beyond the
window (10 s in Mimi's config) codes can differ from qwen-tts's on 4.57.

llama.cpp does not convert this encoder; ggtts stores it in the mmproj file under ``a.tok_enc.*``
(:class:`ggtts.gguf.keys.Qwen3TTS`), which llama.cpp's loader passes over.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ggtts.errors import GGUFError, InputError
from ggtts.gguf import GGUFFile
from ggtts.gguf.keys import Qwen3TTS as K

SAMPLE_RATE = 24_000


@dataclass(frozen=True)
class EncoderConfig:
    ratios: tuple[int, ...]  # Mimi's upsampling_ratios (the encoder strides through them in reverse)
    residual_layers: int
    dilation_growth: int
    block_count: int
    head_count: int
    head_count_kv: int
    head_dim: int
    norm_eps: float
    rope_theta: float
    sliding_window: int
    downsample: int  # the last convolution's stride (25 Hz -> 12.5 Hz)
    codebooks: int  # kept (upstream's encoder_valid_num_quantizers)
    semantic_codebooks: int
    frame_samples: int  # samples per frame (upstream's encode_downsample_rate)

    @classmethod
    def from_gguf(cls, g: GGUFFile) -> EncoderConfig:
        return cls(
            ratios=tuple(int(r) for r in g.get_list(K.ENC_RATIOS)),
            residual_layers=g.get_int(K.ENC_RESIDUAL_LAYERS),
            dilation_growth=g.get_int(K.ENC_DILATION_GROWTH),
            block_count=g.get_int(K.ENC_BLOCK_COUNT),
            head_count=g.get_int(K.ENC_HEAD_COUNT),
            head_count_kv=g.get_int(K.ENC_HEAD_COUNT_KV),
            head_dim=g.get_int(K.ENC_HEAD_DIM),
            norm_eps=g.get_float(K.ENC_NORM_EPS),
            rope_theta=g.get_float(K.ENC_ROPE_FREQ_BASE),
            sliding_window=g.get_int(K.ENC_SLIDING_WINDOW),
            downsample=g.get_int(K.ENC_DOWNSAMPLE),
            codebooks=g.get_int(K.ENC_CODEBOOKS),
            semantic_codebooks=g.get_int(K.ENC_SEMANTIC_CODEBOOKS),
            frame_samples=g.get_int(K.ENC_FRAME_SAMPLES),
        )


def causal_conv(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, stride: int = 1, dilation: int = 1,
                mode: str = "constant") -> torch.Tensor:  # fmt: skip
    """Mimi's causal convolution: ``kernel - stride`` on the left, the right padded up to a whole stride."""
    kernel = (w.shape[-1] - 1) * dilation + 1
    extra = -x.shape[-1] % stride
    return F.conv1d(F.pad(x, (kernel - stride, extra), mode=mode), w, b, stride, dilation=dilation)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat([-b, a], dim=-1)


class SpeechEncoder:
    """The encoder of a Base model's mmproj file (widened to float32): :meth:`encode` makes a reference
    recording's codes."""

    def __init__(self, cfg: EncoderConfig, weights: dict[str, torch.Tensor], path: str) -> None:
        self.cfg, self.w, self.path = cfg, weights, path

    @classmethod
    def from_gguf(cls, g: GGUFFile) -> SpeechEncoder:
        if f"{K.ENC}.conv_in.weight" not in g:
            raise GGUFError(f"{g.path}: no speech tokenizer encoder in this mmproj (llama.cpp's converter does not "
                            "write it: convert the Base checkpoint with ggtts convert qwen3tts)")  # fmt: skip
        try:
            cfg = EncoderConfig.from_gguf(g)
        except (TypeError, ValueError, OverflowError) as e:
            raise GGUFError(
                f"{g.path}: the speech encoder's settings are not numbers of the right kind ({e})"
            ) from None
        weights = {n.removeprefix(K.ENC + "."): g.tensor(n).float() for n in g.names() if n.startswith(K.ENC + ".")}
        encoder = cls(cfg, weights, str(g.path))
        encoder._check()
        return encoder

    def _need(self, name: str) -> torch.Tensor:
        if name not in self.w:
            raise GGUFError(f"{self.path}: missing tensor '{K.ENC}.{name}'")
        return self.w[name]

    def _check(self) -> None:
        c = self.cfg
        if not c.ratios or min(c.ratios) < 1 or c.downsample < 1 or c.residual_layers < 0 or c.dilation_growth < 1:
            raise GGUFError(f"{self.path}: the speech encoder's strides or dilations are not positive")
        if not (math.isfinite(c.rope_theta) and c.rope_theta > 0 and math.isfinite(c.norm_eps) and c.norm_eps > 0):
            raise GGUFError(f"{self.path}: the speech encoder's RoPE base or norm epsilon is not a positive number")
        if (
            c.head_count < 1
            or c.head_count_kv < 1
            or c.head_count % c.head_count_kv
            or c.head_dim < 2
            or c.head_dim % 2
        ):
            raise GGUFError(f"{self.path}: the speech encoder's attention heads do not fit together")
        if not 1 <= c.semantic_codebooks < c.codebooks or c.sliding_window < 1 or c.frame_samples < 1:
            raise GGUFError(f"{self.path}: the speech encoder's codebooks, window or frame length are not valid")
        width = self._need("conv_out.weight").shape[0]
        for i in range(c.block_count):
            for part in ("attn_q", "attn_k", "attn_v", "attn_out", "ffn_up", "ffn_down"):
                self._need(f"tfm.blk.{i}.{part}.weight")
        q = self._need("tfm.blk.0.attn_q.weight").shape if c.block_count else (c.head_count * c.head_dim, width)
        if q != (c.head_count * c.head_dim, width):
            raise GGUFError(f"{self.path}: the speech encoder's attention is {list(q)}, not "
                            f"{c.head_count} heads of {c.head_dim} over {width}")  # fmt: skip
        for part, n in (("first", c.semantic_codebooks), ("rest", c.codebooks - c.semantic_codebooks)):
            books = self._need(f"quant.{part}.codebook.weight")
            proj = self._need(f"quant.{part}.in_proj.weight")
            if books.dim() != 3 or books.shape[0] != n or proj.dim() != 2 or books.shape[2] != proj.shape[0] or (
                    proj.shape[1] != width):  # fmt: skip
                raise GGUFError(f"{self.path}: the speech encoder's '{part}' quantizer does not fit "
                                f"({list(books.shape)} codebooks, {list(proj.shape)} projection)")  # fmt: skip
        if not all(torch.isfinite(t).all() for t in self.w.values()):
            raise GGUFError(f"{self.path}: the speech encoder holds values that are not finite numbers")

    @property
    def codebook_size(self) -> int:
        return int(self.w["quant.first.codebook.weight"].shape[1])

    def _seanet(self, x: torch.Tensor) -> torch.Tensor:
        c, w = self.cfg, self._need
        x = causal_conv(x, w("conv_in.weight"), w("conv_in.bias"))
        for s, ratio in enumerate(reversed(c.ratios)):
            for j in range(c.residual_layers):
                p = f"blk.{s}.res.{j}"
                h = causal_conv(F.elu(x), w(f"{p}.conv1.weight"), w(f"{p}.conv1.bias"), dilation=c.dilation_growth**j)
                x = x + causal_conv(F.elu(h), w(f"{p}.conv2.weight"), w(f"{p}.conv2.bias"))
            x = causal_conv(F.elu(x), w(f"blk.{s}.down.weight"), w(f"blk.{s}.down.bias"), stride=ratio)
        return causal_conv(F.elu(x), w("conv_out.weight"), w("conv_out.bias"))

    def _transformer(self, x: torch.Tensor) -> torch.Tensor:
        """``(1, T, width)`` through the sliding-window causal transformer."""
        c, w = self.cfg, self._need
        t, width = x.shape[1], x.shape[2]
        inv = 1.0 / (c.rope_theta ** (torch.arange(0, c.head_dim, 2, dtype=torch.float32) / c.head_dim))
        angles = torch.arange(t, dtype=torch.float32)[:, None] * inv
        cos, sin = torch.cat([angles, angles], -1).cos(), torch.cat([angles, angles], -1).sin()
        i = torch.arange(t)
        allowed = (i[None, :] <= i[:, None]) & (i[:, None] - i[None, :] < c.sliding_window)
        mask = torch.zeros(t, t).masked_fill(~allowed, float("-inf"))
        group = c.head_count // c.head_count_kv
        for layer in range(c.block_count):
            p = f"tfm.blk.{layer}"
            h = F.layer_norm(x, (width,), w(f"{p}.ln1.weight"), w(f"{p}.ln1.bias"), c.norm_eps)
            q = F.linear(h, w(f"{p}.attn_q.weight")).view(1, t, c.head_count, c.head_dim).transpose(1, 2)
            k = F.linear(h, w(f"{p}.attn_k.weight")).view(1, t, c.head_count_kv, c.head_dim).transpose(1, 2)
            v = F.linear(h, w(f"{p}.attn_v.weight")).view(1, t, c.head_count_kv, c.head_dim).transpose(1, 2)
            q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0 / math.sqrt(c.head_dim))
            x = x + w(f"{p}.ls1.weight") * F.linear(a.transpose(1, 2).reshape(1, t, -1), w(f"{p}.attn_out.weight"))
            h = F.layer_norm(x, (width,), w(f"{p}.ln2.weight"), w(f"{p}.ln2.bias"), c.norm_eps)
            h = F.linear(F.gelu(F.linear(h, w(f"{p}.ffn_up.weight"))), w(f"{p}.ffn_down.weight"))
            x = x + w(f"{p}.ls2.weight") * h
        return x

    def latents(self, samples: torch.Tensor) -> torch.Tensor:
        """24 kHz mono samples ``(n,)`` -> the quantizer's input ``(1, width, frames)`` (before the trim)."""
        x = samples.to(torch.float32).reshape(1, 1, -1)
        x = self._transformer(self._seanet(x).transpose(1, 2)).transpose(1, 2)
        return causal_conv(x, self._need("downsample.weight"), None, stride=self.cfg.downsample, mode="replicate")

    def nearest(self, latents: torch.Tensor) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """The split residual quantizer over :meth:`latents`, codebook by codebook: each one's distances from what
        the earlier codebooks left ``(frames, entries)`` and its nearest entries ``(frames,)``."""
        for part in ("first", "rest"):
            residual = F.linear(latents.transpose(1, 2), self.w[f"quant.{part}.in_proj.weight"])[0]  # (N, dim)
            for book in self.w[f"quant.{part}.codebook.weight"]:
                distances = torch.cdist(residual[None], book[None], p=2)[0]
                index = distances.argmin(dim=-1)
                residual = residual - book[index]
                yield distances, index

    @torch.inference_mode()
    def encode(self, samples: torch.Tensor) -> torch.Tensor:
        """24 kHz mono samples ``(n,)`` -> codes ``(frames, codebooks)``, ``frames = ceil(n / frame_samples)``."""
        if samples.dim() != 1 or samples.numel() == 0:
            raise InputError("the speech encoder takes one non-empty channel of samples")
        try:  # shapes that do not chain (a damaged file) fail inside torch: one error naming the file
            latents = self.latents(samples)
            codes = [index for _, index in self.nearest(latents)]
        except (RuntimeError, IndexError, ValueError) as e:
            first_line = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise GGUFError(f"{self.path}: the speech encoder's tensors do not fit together ({first_line})") from None
        if not torch.isfinite(latents).all():
            raise GGUFError(f"{self.path}: the speech encoder made values that are not finite numbers")
        frames = -(-samples.numel() // self.cfg.frame_samples)
        return torch.stack(codes, dim=1)[:frames]
