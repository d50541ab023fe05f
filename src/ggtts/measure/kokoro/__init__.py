"""Kokoro's measurement parts: its parity check against hexgrad's code, the upstream builders, `ggtts bench`
and its peers (kokoro-onnx, hexgrad's torch code). Registered by name in :mod:`ggtts.families.kokoro`; nothing
that speaks imports them."""
