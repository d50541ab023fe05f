"""Build a Piper voice from a GGUF file, strictly (every tensor present, of the right shape, none extra)."""

from __future__ import annotations

import torch

from ggtts.gguf import GGUFFile
from ggtts.models.layers.gguf_state import empty_modules, load_module_from_gguf
from ggtts.models.piper.config import PiperConfig
from ggtts.models.piper.model import PiperModel


def load_piper(gguf: GGUFFile, device: str | torch.device = "cpu") -> PiperModel:
    """-> the voice in eval mode on ``device``; on a CPU its decoder's stages run channels-last
    (:meth:`~ggtts.models.piper.model.Generator.use_channels_last`)."""
    config = PiperConfig.from_gguf(gguf)
    with empty_modules():  # no memory and no random init for weights about to be replaced
        model = PiperModel(config)
    load_module_from_gguf(model, gguf, device=torch.device(device))
    if torch.device(device).type == "cpu":
        model.dec.use_channels_last()
    return model.eval().requires_grad_(False)
