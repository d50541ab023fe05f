"""Qwen3-Omni's thinker text model (llama.cpp's ``qwen3omnimoe``, or the same file as ``qwen3moe``)."""

from ggtts.models.qwen3omnimoe.config import ThinkerConfig
from ggtts.models.qwen3omnimoe.model import Thinker, ThinkerTooLarge, required_bytes

__all__ = ["Thinker", "ThinkerConfig", "ThinkerTooLarge", "required_bytes"]
