"""The KV caches the generation runtime passes to a model's step. They live beside the models that write them
(:mod:`ggtts.models.layers.kv_cache`: models must not import the runtime); this is their runtime-side name."""

from ggtts.models.layers.kv_cache import CrossAttentionCache, EncoderDecoderCache, KVCache, KVCacheFullError

__all__ = ["CrossAttentionCache", "EncoderDecoderCache", "KVCache", "KVCacheFullError"]
