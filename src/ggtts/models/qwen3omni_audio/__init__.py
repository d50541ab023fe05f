"""Qwen3-Omni's audio encoder: log-mel features (:mod:`.features`), the encoder and projector (:mod:`.model`) read
from llama.cpp's ``qwen3a`` mmproj file (:mod:`.config`)."""
