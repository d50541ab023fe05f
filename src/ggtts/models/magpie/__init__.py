"""Magpie TTS (NVIDIA NeMo): see :mod:`ggtts.models.magpie.model`."""
