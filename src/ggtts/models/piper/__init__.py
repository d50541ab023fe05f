"""Piper voices (VITS): config from GGUF metadata and tensor shapes, the inference modules, the strict loader."""
