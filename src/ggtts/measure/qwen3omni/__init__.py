"""Qwen3-Omni's measurement parts: its parity check against transformers and the tiny upstream builders. Registered by
name in :mod:`ggtts.families.qwen3omni`; nothing that speaks imports them."""
