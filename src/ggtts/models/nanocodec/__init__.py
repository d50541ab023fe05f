"""NeMo nano codec decoder (GGUF architecture ``nano-codec``): FSQ codes -> causal HiFi-GAN -> waveform."""
