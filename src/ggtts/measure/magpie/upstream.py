"""NeMo's Magpie TTS parts at tiny sizes with random weights, saved as real ``.nemo`` archives by NeMo itself.

Used by the parity tests (and only there): NeMo is a reference package, imported inside the builders.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

# ---- the nano codec (AudioCodecModel: GroupFiniteScalarQuantizer + CausalHiFiGANDecoder) --------------------------

_CODEC_MODULES = "nemo.collections.tts.modules.audio_codec_modules"
_CODEC_LOSSES = "nemo.collections.tts.losses.audio_codec_loss"
TINY_CODEC_SAMPLE_RATE = 22_050  # Hz, the real nano codec's
TINY_FSQ_LEVELS = (8, 7, 6, 6)  # the real nano codec's levels per group: 2016 codes per codebook
TINY_DECODER_CHANNELS = 24  # halved at each upsampling stage: 24, 12, 6, 3 (odd, as the real 864 ... 27 ends)
TINY_ENCODER_CHANNELS = 8
MAX_UP_SAMPLE_RATE = 8  # the real nano codec's largest stage
# Re-initialised weights: weight-norm magnitudes g and Snake alphas drawn from these ranges, so that every
# parameter matters (NeMo initialises g to |v| and every alpha to 1, which would hide a mixed-up alpha).
G_RANGE = (0.4, 1.2)
ALPHA_RANGE = (0.3, 2.5)
BIAS_STD = 0.1


def _up_sample_rates(samples_per_frame: int) -> list[int]:
    """Factors of ``samples_per_frame``, largest first, each at most half the one before where possible:
    64 -> [8, 4, 2]."""
    rates: list[int] = []
    rest, cap = samples_per_frame, MAX_UP_SAMPLE_RATE
    while rest > 1:
        divisors = [d for d in range(min(cap, rest), 1, -1) if rest % d == 0]
        if not divisors:  # nothing under the cap: the smallest factor left
            divisors = [next(d for d in range(2, rest + 1) if rest % d == 0)]
        rates.append(divisors[0])
        rest //= divisors[0]
        cap = max(2, divisors[0] // 2)
    return rates


def tiny_codec_config(
    *,
    num_groups: int = 4,
    samples_per_frame: int = 64,
    activation: str = "half_snake",
    output_activation: str = "tanh",
    decoder_channels: int | None = None,
    up_sample_rates: list[int] | None = None,
) -> dict[str, Any]:
    """An ``AudioCodecModel`` config (as in a ``.nemo``'s ``model_config.yaml``) with small widths, unless
    ``decoder_channels`` and ``up_sample_rates`` ask for others (the real nano codec: 864, [8, 8, 4, 2, 2])."""
    rates = up_sample_rates or _up_sample_rates(samples_per_frame)
    if math.prod(rates) != samples_per_frame:
        raise ValueError(f"samples_per_frame {samples_per_frame} does not factor into upsampling rates")
    latent_dim = num_groups * len(TINY_FSQ_LEVELS)
    return {
        "sample_rate": TINY_CODEC_SAMPLE_RATE,
        "samples_per_frame": samples_per_frame,
        "audio_encoder": {
            "_target_": f"{_CODEC_MODULES}.CausalHiFiGANEncoder",
            "encoded_dim": latent_dim,
            "down_sample_rates": rates[::-1],
            "base_channels": TINY_ENCODER_CHANNELS,
            "activation": "lrelu",
        },
        "vector_quantizer": {
            "_target_": f"{_CODEC_MODULES}.GroupFiniteScalarQuantizer",
            "num_groups": num_groups,
            "num_levels_per_group": list(TINY_FSQ_LEVELS),
        },
        "audio_decoder": {
            "_target_": f"{_CODEC_MODULES}.CausalHiFiGANDecoder",
            "input_dim": latent_dim,
            "up_sample_rates": rates,
            "base_channels": decoder_channels or TINY_DECODER_CHANNELS * 2 ** max(0, len(rates) - 3),
            "activation": activation,
            "output_activation": output_activation,
        },
        "commit_loss_scale": 0.0,
        "loss_resolutions": [[256, 64, 256]],
        "mel_loss_dims": [32],
        "generator_loss": {"_target_": f"{_CODEC_LOSSES}.GeneratorSquaredLoss"},
        "discriminator_loss": {"_target_": f"{_CODEC_LOSSES}.DiscriminatorSquaredLoss"},
    }


def _randomize_decoder(decoder: torch.nn.Module, seed: int) -> None:
    """Seeded random weight-norm directions and magnitudes, biases and Snake alphas for every decoder layer."""
    gen = torch.Generator().manual_seed(seed)

    def uniform(t: torch.Tensor, low: float, high: float) -> torch.Tensor:
        return low + (high - low) * torch.rand(t.shape, generator=gen)

    with torch.no_grad():
        for name, p in sorted(decoder.named_parameters()):
            if name.endswith(("original0", "weight_g")):  # weight-norm magnitude
                p.copy_(uniform(p, *G_RANGE))
            elif name.endswith(("original1", "weight_v")):  # weight-norm direction
                p.copy_(torch.randn(p.shape, generator=gen))
            elif name.endswith(".alpha"):
                p.copy_(uniform(p, *ALPHA_RANGE))
            elif name.endswith(".bias"):
                p.copy_(torch.randn(p.shape, generator=gen) * BIAS_STD)


def build_tiny_codec(path: Path, *, seed: int = 0, **layout: Any) -> Path:
    """A tiny random NeMo ``AudioCodecModel`` (nano codec layout) saved by NeMo as the ``.nemo`` file ``path``;
    ``layout`` takes :func:`tiny_codec_config`'s arguments (another size, activation, ...)."""
    from nemo.collections.tts.models import AudioCodecModel
    from omegaconf import OmegaConf

    cfg = tiny_codec_config(**layout)
    torch.manual_seed(seed)  # the encoder's own initialisation
    model = AudioCodecModel(OmegaConf.create(cfg))
    _randomize_decoder(model.audio_decoder, seed)
    model.eval()
    path.parent.mkdir(parents=True, exist_ok=True)
    model.save_to(str(path))
    return path
