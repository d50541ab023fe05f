"""Piper's measurement parts: tiny voices built with piper-tts's VITS code and its stage-by-stage parity check.
Registered by name in :mod:`ggtts.families.piper`; nothing that speaks imports them."""
