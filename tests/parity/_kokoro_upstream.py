"""hexgrad's ``kokoro`` modules built offline at any size with random weights: the helper lives in the package
(``ggtts parity kokoro`` uses it too); the tests import it from here."""

from ggtts.measure.kokoro.upstream import (
    TINY_VOCAB,
    Upstream,
    build_upstream,
    random_voices,
    tiny_config,
    upstream_source,
    upstream_stages,
    v1_config,
)

__all__ = [
    "TINY_VOCAB",
    "Upstream",
    "build_upstream",
    "random_voices",
    "tiny_config",
    "upstream_source",
    "upstream_stages",
    "v1_config",
]
