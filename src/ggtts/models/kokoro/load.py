"""Build a Kokoro model from a GGUF file, strictly (the shared loader: every tensor present, of the right shape,
and none extra but the voicepacks), and read its voicepacks."""

from __future__ import annotations

import torch

from ggtts.errors import GGUFError
from ggtts.gguf import GGUFFile
from ggtts.gguf.keys import Kokoro as K
from ggtts.models.kokoro.config import KokoroConfig
from ggtts.models.kokoro.model import KokoroModel
from ggtts.models.layers.gguf_state import empty_modules, load_module_from_gguf
from ggtts.models.layers.validate import check_finite

VOICE_PREFIX = K.VOICE_TENSOR.format(name="")


def load_kokoro(
    gguf: GGUFFile, device: str | torch.device = "cpu"
) -> tuple[KokoroConfig, KokoroModel, dict[str, torch.Tensor], dict[str, int]]:
    """-> (config, model in eval mode on ``device``, voice name -> voicepack (N, 1, 2 * style), vocab)."""
    config = KokoroConfig.from_gguf(gguf)
    device = torch.device(device)
    with empty_modules():  # no memory and no random init for weights about to be replaced
        model = KokoroModel(config)
    load_module_from_gguf(model, gguf, gguf_name=K.to_gguf_name, ignore_prefixes=(VOICE_PREFIX,), device=device)
    model.eval().requires_grad_(False)
    return config, model, _load_voices(gguf, config, device), dict(config.vocab)


def _load_voices(gguf: GGUFFile, config: KokoroConfig, device: torch.device) -> dict[str, torch.Tensor]:
    names = gguf.require(K.VOICE_NAMES)
    if not isinstance(names, list) or not names:
        raise GGUFError(f"{gguf.path}: metadata '{K.VOICE_NAMES}' must list at least one voice")
    listed = set(names)
    for name in gguf.names():
        if name.startswith(VOICE_PREFIX) and name[len(VOICE_PREFIX) :] not in listed:
            raise GGUFError(f"{gguf.path}: tensor '{name}' is not listed in '{K.VOICE_NAMES}'")
    voices: dict[str, torch.Tensor] = {}
    width = 2 * config.style_dim
    for name in names:
        tensor_name = K.VOICE_TENSOR.format(name=name)
        label = f"voice '{name}' (tensor '{tensor_name}')"
        shape = gguf.info(tensor_name).shape
        rows = shape[0] if shape else 0
        if rows == 0:
            raise GGUFError(f"{gguf.path}: {label} holds no style vectors")
        voice = gguf.tensor(tensor_name, shape=(rows, 1, width))
        check_finite(gguf.path, tensor_name, voice, label=label)
        voices[name] = voice.to(device)
    return voices
