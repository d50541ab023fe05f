"""Kokoro's decoder: an AdaIN residual stack, then ISTFTNet with a harmonic-plus-noise source."""

from __future__ import annotations

import math
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from ggtts.models.kokoro.blocks import AdainResBlk1d, AdaINResBlock1
from ggtts.models.kokoro.config import KokoroConfig
from ggtts.models.kokoro.stft import InverseSTFT
from ggtts.models.layers.channels_last import channels_last, channels_last_convolutions, narrow_convolution

SINE_AMP = 0.1  # amplitude of the harmonic sines
NOISE_STD = 0.003  # noise added in voiced regions
UNVOICED_NOISE_STD = SINE_AMP / 3  # the noise that stands in for the sines where unvoiced
GENERATOR_SLOPE = 0.1  # LeakyReLU before each upsampling
POST_SLOPE = 0.01  # LeakyReLU before conv_post (torch's default slope, as upstream)
NOISE_RES_KERNELS = (7, 11)  # noise_res kernel of an intermediate stage, then of the last stage
NOISE_RES_DILATIONS = (1, 3, 5)


class HarmonicSource(nn.Module):
    """F0 curve -> excitation: sines at F0 and overtones (where voiced) plus Gaussian noise, merged.

    Randomness comes from ``generator``, drawn in upstream's order and shapes (a uniform initial phase
    per harmonic, then one normal sample per harmonic and audio sample): a seeded run reproduces upstream's.
    """

    def __init__(self, config: KokoroConfig) -> None:
        super().__init__()
        self.sample_rate = config.sample_rate
        self.upsample = config.upsample_factor
        self.voiced_threshold = config.voiced_threshold
        n_harmonics = config.harmonic_num + 1
        self.n_harmonics = n_harmonics
        self.l_linear = nn.Linear(n_harmonics, 1)

    def forward(self, f0: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        """f0: (B, frames) in Hz -> (B, frames * upsample) excitation."""
        batch, frames = f0.shape
        n_samples = frames * self.upsample
        harmonics = torch.arange(1, self.n_harmonics + 1, dtype=f0.dtype, device=f0.device)
        # per frame and harmonic: phase increment in cycles per sample, wrapped to [0, 1)
        cycles = (f0[:, None, :] * harmonics[:, None] / self.sample_rate) % 1  # (B, H, frames)
        # Upstream adds a random initial phase to the first audio sample, then linearly resamples to one value
        # per frame, which reads only samples at mid-frame: the draw never reaches the output, but it is drawn
        # here too to keep the random stream in step.
        torch.rand(batch, self.n_harmonics, generator=generator, dtype=f0.dtype, device=f0.device)
        phase = torch.cumsum(cycles, dim=2) * (2 * math.pi)  # radians at each frame's end
        phase = F.interpolate(phase * self.upsample, scale_factor=self.upsample, mode="linear")  # (B, H, samples)
        sines = torch.sin(phase).mul_(SINE_AMP)
        voiced = (f0 > self.voiced_threshold).to(f0.dtype).repeat_interleave(self.upsample, dim=1)[:, None, :]
        noise_amp = voiced * NOISE_STD + (1 - voiced) * UNVOICED_NOISE_STD  # (B, 1, samples)
        # Upstream fills a (B, samples, H) view of (B, H, samples) memory; torch draws normals for such a
        # strided tensor in a different order than for a contiguous one, so the same view is filled here.
        noise = torch.empty(batch, self.n_harmonics, n_samples, dtype=f0.dtype, device=f0.device)
        noise.transpose(1, 2).normal_(generator=generator)
        excitation = torch.addcmul(sines.mul_(voiced), noise_amp, noise)  # (B, H, samples)
        # the merge runs on the (B, samples, H) view, as upstream's does, so that it rounds the same way: the
        # source's phase spectrum (an angle) jumps by 2π wherever a bin's value grazes the negative real axis
        merged = self.l_linear(excitation.transpose(1, 2))  # (B, samples, 1)
        return torch.tanh(merged).squeeze(-1)


class Generator(nn.Module):
    """ISTFTNet: upsampling with source injection, Snake resblocks, then an exact inverse STFT."""

    def __init__(self, config: KokoroConfig) -> None:
        super().__init__()
        style = config.style_dim
        rates, kernels = config.upsample_rates, config.upsample_kernel_sizes
        self.n_fft = config.n_fft
        self.hop_length = config.hop_length
        self.n_kernels = len(config.resblock_kernel_sizes)
        spectrum_channels = config.n_fft + 2  # magnitude and phase of n_fft // 2 + 1 bins
        self.m_source = HarmonicSource(config)
        self.ups = nn.ModuleList()
        self.noise_convs = nn.ModuleList()
        self.noise_res = nn.ModuleList()
        self.resblocks = nn.ModuleList()
        ch = config.upsample_initial_channel
        for i, (rate, kernel) in enumerate(zip(rates, kernels, strict=True)):
            ch_in, ch = ch, ch // 2
            self.ups.append(nn.ConvTranspose1d(ch_in, ch, kernel, rate, padding=(kernel - rate) // 2))
            for k, dilations in zip(config.resblock_kernel_sizes, config.resblock_dilation_sizes, strict=True):
                self.resblocks.append(AdaINResBlock1(ch, k, dilations, style))
            if i + 1 < len(rates):
                stride = math.prod(rates[i + 1 :])
                conv = nn.Conv1d(spectrum_channels, ch, stride * 2, stride=stride, padding=(stride + 1) // 2)
                res_kernel = NOISE_RES_KERNELS[0]
            else:
                conv = nn.Conv1d(spectrum_channels, ch, 1)
                res_kernel = NOISE_RES_KERNELS[1]
            self.noise_convs.append(conv)
            self.noise_res.append(AdaINResBlock1(ch, res_kernel, NOISE_RES_DILATIONS, style))
        self.conv_post = nn.Conv1d(ch, spectrum_channels, 7, 1, padding=3)
        self.istft = InverseSTFT(config.n_fft, config.hop_length)
        self.channels_last = False  # the upsampling stages run channels-last, one row at a time (use_channels_last)

    def use_channels_last(self, dtype: torch.dtype | None = None) -> int:
        """The upsampling stages (but ``conv_post``) run over a channels-last layout from now on, a row of a batch
        at a time (:mod:`ggtts.models.layers.channels_last`: the same maths, 1.4-3x faster convolutions on a CPU
        here); the resblocks' and noise paths' products in ``dtype`` (None: the weights' own; bfloat16: what
        :func:`~ggtts.models.kokoro.precision.use_bfloat16_convolutions` does in 1-D), the upsampling's in the weights'.
        How many convolutions were turned."""
        self.channels_last = True
        turned = channels_last_convolutions(self.ups)
        return turned + sum(channels_last_convolutions(part, dtype) for part in (self.resblocks, self.noise_res,
                                                                               self.noise_convs))  # fmt: skip

    def source_spectrum(self, f0: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        """f0: (B, frames) -> (B, n_fft + 2, stft frames): magnitude then phase of the harmonic source."""
        source = self.m_source(f0, generator)
        spec = torch.stft(
            source,
            self.n_fft,
            self.hop_length,
            self.n_fft,
            window=self.istft.window(f0.device, source.dtype),
            return_complex=True,
        )
        return torch.cat([spec.abs(), spec.angle()], dim=1)

    def forward(
        self, x: torch.Tensor, s: torch.Tensor, f0: torch.Tensor, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        """x: (B, C, frames), s: (B, style), f0: (B, f0 frames) -> (B, samples)."""
        return self.render(x, s, self.source_spectrum(f0, generator))

    def render(self, x: torch.Tensor, s: torch.Tensor, har: torch.Tensor) -> torch.Tensor:
        """x: (B, C, frames), s: (B, style), har: (B, n_fft + 2, frames * upsampling + 1) the source's spectrum
        (:meth:`source_spectrum`) -> (B, samples). Any leading run of ``x``'s frames renders with the same run of
        ``har``'s: ``x[..., :k]`` with ``har[..., :k * math.prod(upsample rates) + 1]``."""
        spectrum = self.body(x, s, har)
        bins = self.n_fft // 2 + 1
        return self.istft(torch.exp(spectrum[:, :bins]), torch.sin(spectrum[:, bins:]))

    @property
    def spectrum_frames_per_frame(self) -> int:
        """Source-spectrum frames per input frame (the upsampling stages' product)."""
        return math.prod(cast(nn.ConvTranspose1d, up).stride[0] for up in self.ups)

    def body(self, x: torch.Tensor, s: torch.Tensor, har: torch.Tensor) -> torch.Tensor:
        """The upsampling stages with the source injected, then ``conv_post``: (B, n_fft + 2, STFT frames), log
        magnitude then phase. No randomness and no Python-side state: what ``compile=True`` compiles."""
        if self.channels_last and x.shape[0] > 1:  # channels-last runs a row at a time
            return torch.cat([self.body(x[i : i + 1], s[i : i + 1], har[i : i + 1]) for i in range(x.shape[0])])
        if self.channels_last:
            x, har = channels_last(x), channels_last(har)  # (1, C, 1, T), time-major
        last = len(self.ups) - 1
        for i, (up, noise_conv, noise_res) in enumerate(zip(self.ups, self.noise_convs, self.noise_res, strict=True)):
            x = up(F.leaky_relu(x, GENERATOR_SLOPE))
            if i == last:  # reflection padding by one at the start: the second sample, first
                x = torch.cat([x[..., 1:2], x], dim=-1)
            x = x + noise_res(noise_conv(har), s)
            blocks = self.resblocks[i * self.n_kernels : (i + 1) * self.n_kernels]
            total = blocks[0](x, s)
            for block in blocks[1:]:
                total = total + block(x, s)
            x = total / self.n_kernels
        if x.dim() == 4:  # channels-last: conv_post over the time-major rows, with no copy to (B, C, T)
            return narrow_convolution(F.leaky_relu(x, POST_SLOPE, inplace=True), self.conv_post)
        return self.conv_post(F.leaky_relu(x, POST_SLOPE))


class Decoder(nn.Module):
    """Aligned text features, F0 and energy, timbre style -> audio samples."""

    def __init__(self, config: KokoroConfig) -> None:
        super().__init__()
        hidden, style, wide = config.hidden_dim, config.style_dim, config.decoder_hidden_dim
        curves = 2  # the F0 and energy channels appended to the features
        self.encode = AdainResBlk1d(hidden + curves, wide, style)
        stacked = wide + curves + config.dim_in
        self.decode = nn.ModuleList(
            [
                AdainResBlk1d(stacked, wide, style),
                AdainResBlk1d(stacked, wide, style),
                AdainResBlk1d(stacked, wide, style),
                AdainResBlk1d(stacked, config.upsample_initial_channel, style, upsample=True),
            ]
        )
        self.F0_conv = nn.Conv1d(1, 1, kernel_size=3, stride=2, padding=1)
        self.N_conv = nn.Conv1d(1, 1, kernel_size=3, stride=2, padding=1)
        self.asr_res = nn.Sequential(nn.Conv1d(hidden, config.dim_in, kernel_size=1))
        self.generator = Generator(config)

    def forward(
        self,
        asr: torch.Tensor,
        f0: torch.Tensor,
        n: torch.Tensor,
        s: torch.Tensor,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """asr: (B, hidden, frames); f0, n: (B, 2 * frames); s: (B, style) timbre -> (B, samples)."""
        return self.generator(self.features(asr, f0, n, s), s, f0, generator)

    def features(self, asr: torch.Tensor, f0: torch.Tensor, n: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        """The AdaIN residual stack: (B, upsample_initial_channel, 2 * frames), the generator's input."""
        f0_down = self.F0_conv(f0.unsqueeze(1))  # (B, 1, frames)
        n_down = self.N_conv(n.unsqueeze(1))
        x = self.encode(torch.cat([asr, f0_down, n_down], dim=1), s)
        asr_res = self.asr_res(asr)
        upsampled = False
        for block in self.decode:
            if not upsampled:  # features are re-appended up to and including the block that upsamples
                x = torch.cat([x, asr_res, f0_down, n_down], dim=1)
            x = block(x, s)
            upsampled = upsampled or cast(AdainResBlk1d, block).upsample
        return x
