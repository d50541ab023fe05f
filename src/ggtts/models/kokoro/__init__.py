"""Kokoro-82M: config (:mod:`.config`, which imports no torch: ``ggtts speak`` reads it before torch is imported),
modules (:mod:`.model`) and GGUF loader (:mod:`.load`)."""
