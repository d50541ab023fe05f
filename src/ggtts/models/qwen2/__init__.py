"""Qwen2 decoder-only language model (llama.cpp architecture ``qwen2``)."""
