"""Qwen3-Omni's audio encoder and projector, with module names equal to llama.cpp's mmproj names.

Log-mel features ``(n_mel, T)`` are cut into chunks of ``2 * n_window`` frames (100: one second; the last may be
shorter), zero-padded to the longest, and each chunk goes through three stride-2 3x3 convolutions with GELU
(``a.conv2d.1..3``: 100 frames -> 13 positions), the flattened channels-by-mel axis is projected to the model width
(``a.conv_out``) and the chunk's positions get sinusoids 0..12 (each chunk starts again at 0). The chunks' valid
positions are joined and run through pre-norm transformer layers whose attention stays within windows of
``n_window_infer`` frames' worth of positions (800 frames: 104 positions); then ``a.post_ln`` and the projector
``mm.a.mlp.1`` -> GELU -> ``mm.a.mlp.2`` to the thinker's width. This is transformers'
``Qwen3OmniMoeAudioEncoder`` (its non-flash path); llama.cpp instead pads the last chunk to 100 frames and attends
across a whole 800-frame window in one piece, the same windows but not the same last chunk.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ggtts.gguf import GGUFFile
from ggtts.models.layers.gguf_state import empty_modules, load_module_from_gguf
from ggtts.models.qwen3omni_audio.config import AudioConfig, conv_length
from ggtts.ops.stored_weights import stored_weights_plan, use_planned_weights

AUDIO_PREFIXES = ("a.", "mm.a.")  # an Omni mmproj file from llama.cpp also holds the vision tower (v.*, mm.N.*)


class PositionTable(nn.Module):
    def __init__(self, rows: int, width: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(rows, width), requires_grad=False)


class EncoderLayer(nn.Module):
    def __init__(self, dim: int, n_heads: int, n_ff: int, eps: float) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.ln1 = nn.LayerNorm(dim, eps=eps)
        self.attn_q = nn.Linear(dim, dim)
        self.attn_k = nn.Linear(dim, dim)
        self.attn_v = nn.Linear(dim, dim)
        self.attn_out = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim, eps=eps)
        self.ffn_up = nn.Linear(dim, n_ff)
        self.ffn_down = nn.Linear(n_ff, dim)

    def attend(self, x: torch.Tensor, window: int) -> torch.Tensor:
        """Self-attention of ``x`` ``(N, dim)`` within consecutive windows of ``window`` positions."""
        n, dim = x.shape
        h, d = self.n_heads, dim // self.n_heads
        q, k, v = (proj(x).view(n, h, d).transpose(0, 1) for proj in (self.attn_q, self.attn_k, self.attn_v))
        full = (n // window) * window
        parts = []
        if full:  # the whole windows as one batch
            qs, ks, vs = (t[:, :full].reshape(h, full // window, window, d).transpose(0, 1) for t in (q, k, v))
            o = F.scaled_dot_product_attention(qs, ks, vs)  # (windows, h, window, d)
            parts.append(o.transpose(0, 1).reshape(h, full, d))
        if full < n:
            parts.append(F.scaled_dot_product_attention(q[:, full:], k[:, full:], v[:, full:]))
        out = torch.cat(parts, dim=1) if len(parts) > 1 else parts[0]
        return self.attn_out(out.transpose(0, 1).reshape(n, dim))

    def forward(self, x: torch.Tensor, window: int) -> torch.Tensor:
        x = x + self.attend(self.ln1(x), window)
        return x + self.ffn_down(F.gelu(self.ffn_up(self.ln2(x))))


class Tower(nn.Module):
    """``a.*``: the convolutions, positions and transformer layers."""

    def __init__(self, cfg: AudioConfig) -> None:
        super().__init__()
        c, d = cfg.conv_channels, cfg.dim
        self.conv2d = nn.ModuleDict(
            {str(i): nn.Conv2d(1 if i == 1 else c, c, 3, stride=2, padding=1) for i in (1, 2, 3)}
        )
        self.conv_out = nn.Linear(c * cfg.mel_after_conv, d, bias=False)
        self.position_embd = PositionTable(cfg.positions, d)
        self.blk = nn.ModuleList(EncoderLayer(d, cfg.n_heads, cfg.n_ff, cfg.eps) for _ in range(cfg.n_layers))
        self.post_ln = nn.LayerNorm(d, eps=cfg.eps)


class Projector(nn.Module):
    """``mm.a.mlp.{1,2}``: the tower's width to the thinker's."""

    def __init__(self, dim: int, out_dim: int) -> None:
        super().__init__()
        self.mlp = nn.ModuleDict({"1": nn.Linear(dim, dim), "2": nn.Linear(dim, out_dim)})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mlp["2"](F.gelu(self.mlp["1"](x)))


class Projectors(nn.Module):
    """``mm.*``: the projector of each modality (here the audio one, ``mm.a``)."""

    def __init__(self, dim: int, out_dim: int) -> None:
        super().__init__()
        self.a = Projector(dim, out_dim)


class AudioEncoder(nn.Module):
    def __init__(self, cfg: AudioConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.a = Tower(cfg)
        self.mm = Projectors(cfg.dim, cfg.out_dim)
        self.weights_note: str | None = None

    @classmethod
    def from_gguf(
        cls, gguf: GGUFFile, device: str | torch.device = "cpu", *, stored_weights: bool = True
    ) -> AudioEncoder:
        """The encoder of a ``clip`` / ``qwen3a`` mmproj file. Linear weights stored as Q8_0 (or F16, BF16) run
        through ggml's kernels on the CPU where ggml is installed; the rest is widened to float32."""
        cfg = AudioConfig.from_gguf(gguf)
        with empty_modules():
            model = cls(cfg)
        plan = stored_weights_plan(device, stored_weights)
        consumed = use_planned_weights(plan, model, gguf)
        model.weights_note = plan.reason
        others = {n for n in gguf.names() if not n.startswith(AUDIO_PREFIXES)}  # a vision tower beside it
        load_module_from_gguf(model, gguf, ignore=consumed | others, device=device)
        return model.to(device=device, dtype=torch.float32).eval()

    @property
    def device(self) -> torch.device:
        return self.a.post_ln.weight.device

    def chunks(self, frames: int) -> list[int]:
        """The chunk lengths ``frames`` mel frames are cut into."""
        full, tail = divmod(frames, self.cfg.chunk)
        return [self.cfg.chunk] * full + ([tail] if tail else [])

    def window(self, frames: int) -> int:
        """Encoder positions one attention window holds (upstream counts it from the longest chunk)."""
        return conv_length(max(self.chunks(frames))) * (self.cfg.n_window_infer // self.cfg.chunk)

    @torch.no_grad()
    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """Features ``(n_mel, T)`` -> ``(cfg.tokens(T), out_dim)``: one row per audio placeholder of the thinker."""
        cfg = self.cfg
        if features.dim() != 2 or features.shape[0] != cfg.n_mel or features.shape[1] < 1:
            raise ValueError(f"features must be ({cfg.n_mel}, T >= 1), got {tuple(features.shape)}")
        lengths = self.chunks(int(features.shape[1]))
        longest = max(lengths)
        x = features.to(self.device, torch.float32)
        pieces = list(x.split(lengths, dim=1))
        batch = torch.stack([F.pad(p, (0, longest - p.shape[1])) for p in pieces]).unsqueeze(1)  # (n, 1, mel, L)
        for i in ("1", "2", "3"):
            batch = F.gelu(self.a.conv2d[i](batch))
        n, c, f, t = batch.shape
        h = self.a.conv_out(batch.permute(0, 3, 1, 2).reshape(n, t, c * f))
        h = h + self.a.position_embd.weight[:t].to(h.dtype)
        h = torch.cat([h[i, : conv_length(length)] for i, length in enumerate(lengths)])
        window = self.window(int(features.shape[1]))
        for layer in self.a.blk:
            h = layer(h, window)
        return self.mm.a(self.a.post_ln(h))
