"""Numerics below the models: stored (quantized) weights and experts, ggml's kernels, precision, CUDA step graphs,
compiled modules. Models import these; nothing here imports a model, a family or the generation runtime."""
