"""Qwen3-TTS's measurement parts: the tiny upstream builders (``qwen-tts``'s classes) its parity tests use. Nothing
that speaks imports them."""
