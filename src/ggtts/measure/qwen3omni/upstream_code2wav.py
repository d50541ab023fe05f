"""A tiny random transformers ``Qwen3OmniMoeCode2Wav`` (seeded) and its checkpoint-style tensors, for parity
tests and ``ggtts parity`` (transformers is imported only when a model is built).

Every parameter is drawn at random (transformers initialises SnakeBeta's alpha/beta to 0, ConvNeXt's gamma to
1e-6 and the layer scales to 0.01, which would hide mistakes in them), scaled so that activations stay O(1) and the
audio is not mostly clamped. The published rates (8, 5, 4, 3) x (2, 2) are kept, so the output-length rule is the
real one; widths are small.
"""

from __future__ import annotations

import math
from typing import Any

import torch

SNAKE_SPREAD = 0.3  # std of log alpha and log beta
RESIDUAL_GAIN = 0.3  # residual units' convolutions: activations grow about 1.3x per decoder block, not 2x
OUTPUT_GAIN = 0.1  # the output convolution: audio of std ~0.3, rarely clamped

TINY_CONFIG: dict[str, Any] = {
    "codebook_size": 32,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_quantizers": 16,
    "sliding_window": 6,
    "decoder_dim": 64,
    "upsample_rates": [8, 5, 4, 3],
    "upsampling_ratios": [2, 2],
    "rms_norm_eps": 1e-5,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
}


def build_upstream(config: dict[str, Any] | None = None, seed: int = 0) -> Any:
    """transformers' code2wav with every parameter random (seeded), in eval mode, float32."""
    from transformers.models.qwen3_omni_moe.configuration_qwen3_omni_moe import Qwen3OmniMoeCode2WavConfig
    from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import Qwen3OmniMoeCode2Wav

    torch.manual_seed(seed)
    model = Qwen3OmniMoeCode2Wav(Qwen3OmniMoeCode2WavConfig(**(config or TINY_CONFIG))).eval()
    randomize_decoder(model, torch.Generator().manual_seed(seed))
    return model


def randomize_decoder(model: Any, gen: torch.Generator, prefix: str = "") -> None:
    """Every parameter of a code2wav-shaped decoder (names under ``prefix``) drawn at random, scaled as above.
    Other parameters (a quantizer's codebooks) are left for the caller."""
    last_conv = f"{prefix}decoder.{len(model.decoder) - 1}.conv.weight"
    with torch.no_grad():
        for full, p in model.named_parameters(prefix=prefix.rstrip(".")):
            name = full[len(prefix) :] if prefix else full
            leaf = name.rsplit(".", 1)[-1]
            if name.startswith("quantizer."):
                continue
            if leaf in ("alpha", "beta"):  # log-scale SnakeBeta parameters
                p.copy_(SNAKE_SPREAD * torch.randn(p.shape, generator=gen))
            elif leaf in ("gamma", "scale") or "norm" in name:
                p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=gen))
            elif leaf == "bias":
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))
            elif name == "code_embedding.weight":
                p.copy_(torch.randn(p.shape, generator=gen))
            else:  # Linear (out, in), Conv1d (out, in / groups, k), ConvTranspose1d (in, out, k)
                transposed = name.startswith("upsample.") or ".block.1." in name
                fan_in = p.shape[0] * 2 if transposed else math.prod(p.shape[1:])
                gain = RESIDUAL_GAIN if ".conv1." in name or ".conv2." in name else 1.0
                gain = OUTPUT_GAIN if full == last_conv else gain
                p.copy_(gain * torch.randn(p.shape, generator=gen) / math.sqrt(fan_in))


def checkpoint_tensors(model: Any) -> dict[str, torch.Tensor]:
    """The model's tensors as ``Qwen3OmniMoeForConditionalGeneration`` names them (``code2wav.…``)."""
    return {f"code2wav.{k}": v for k, v in model.state_dict().items()}


def random_codes(frames: int, batch: int = 1, seed: int = 0, config: dict[str, Any] | None = None) -> torch.Tensor:
    cfg = config or TINY_CONFIG
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, cfg["codebook_size"], (batch, cfg["num_quantizers"], frames), generator=gen)
