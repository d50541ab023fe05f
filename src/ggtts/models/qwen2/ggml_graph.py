"""Qwen2's forward pass as one ggml graph per step: decoding without torch's per-operation dispatch.

The same maths as :mod:`ggtts.models.qwen2.model`, built by the shared
:class:`~ggtts.models.layers.ggml_stack.StackGraph` (biased q/k/v projections, no per-head norms): a step embeds
its tokens with the model's table, then runs the blocks, the final norm and the output head (tied to the table
where the file has no ``output``) as one graph on the caller's cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from ggtts.models.layers.ggml_stack import KV_STEP, StackGraph, StackShape, StepPart

if TYPE_CHECKING:
    from ggtts.models.layers.kv_cache import KVCache
    from ggtts.models.qwen2.model import Qwen2Model

__all__ = ["KV_STEP", "Qwen2Graph"]


class Qwen2Graph(StackGraph):
    """Runs :class:`~ggtts.models.qwen2.model.Qwen2Model` steps as ggml graphs (CPU, float32 activations, a float32
    or float16 cache per sequence; several sequences at once with :meth:`forward_many`)."""

    def __init__(self, model: Qwen2Model) -> None:
        cfg = model.cfg
        shape = StackShape(cfg.dim, cfg.n_heads, cfg.n_kv_heads, cfg.head_dim, cfg.rms_eps, cfg.rope_theta,
                           cfg.context_length)  # fmt: skip
        super().__init__(list(model.blk), model.output_norm, shape)
        self.model = model

    def forward(self, tokens: torch.Tensor, cache: KVCache, *, last_only: bool = False) -> torch.Tensor:
        """Tokens ``(1, T)`` at ``cache.length..`` -> logits ``(1, T, V)`` (``(1, 1, V)`` with last_only)."""
        if tokens.shape[0] != 1:
            raise ValueError("ggml graphs take one sequence and a contiguous float32 or float16 CPU cache")
        return self.forward_many([tokens], [cache], last_only=last_only)[0]

    def forward_many(
        self, tokens: Sequence[torch.Tensor], caches: Sequence[KVCache], *, last_only: bool = False
    ) -> list[torch.Tensor]:
        """Several sequences' tokens ``(1, T_i)``, each at its cache's length, as one graph -> each one's logits
        ``(1, T_i or 1, V)``."""
        with torch.inference_mode():  # each sequence's embeddings (T_i, dim)
            parts = [StepPart(self.model.token_embd(t[0]), c, last_only) for t, c in zip(tokens, caches, strict=True)]
        head = self.model.output if self.model.output is not None else self.model.token_embd
        return [out.logits.unsqueeze(0) for out in self.step_many(parts, head)]
