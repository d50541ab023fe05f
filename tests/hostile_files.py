"""What the hostile-file tests change in a model file, drawn by hypothesis: a metadata value of any type, a key
left out, a tensor poisoned, left out or of another shape (tests/piper, tests/qwen3tts)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from gguf_variant import poison


def fuzz(max_examples: int) -> settings:
    """The hostile-file tests' settings: the same cases on every run (derandomized), no deadline."""
    return settings(
        max_examples=max_examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )


def values(words: Sequence[str]) -> st.SearchStrategy[Any]:
    """Metadata values of every type GGUF holds, edge cases first; ``words``: strings the family might take."""
    return st.one_of(
        st.integers(-(2**31), 2**32 - 1),
        st.sampled_from([0, 1, 2, 3, 7, 64, 1 << 12, 1 << 20, 2**32 - 1, -1]),
        st.floats(allow_nan=True, allow_infinity=True, width=32),
        st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -1.0, 1e30]),
        st.booleans(),
        st.text(max_size=12),
        st.sampled_from(list(words)),
        st.lists(st.integers(0, 1 << 16), max_size=6),
        st.lists(st.sampled_from([0, 1, 2, 3, 1 << 12]), min_size=1, max_size=9),
        st.lists(st.text(max_size=3), max_size=6),
    )


def reshaped(cut: str) -> Any:
    """A change to a tensor's shape: flattened, or one row fewer (or doubled) on its first or last dimension."""

    def change(t: torch.Tensor) -> torch.Tensor:
        if cut == "flat":
            return t.reshape(-1)
        dim = 0 if cut == "first" else t.dim() - 1
        return t.narrow(dim, 0, max(1, t.shape[dim] - 1)) if t.shape[dim] > 1 else torch.cat([t, t], dim)

    return change


@st.composite
def damage(draw: st.DrawFn, keys: list[str], names: list[str], value: st.SearchStrategy[Any]) -> dict[str, Any]:
    """One change, as :func:`gguf_variant.variant`'s keyword arguments."""
    kind = draw(st.sampled_from(["value", "drop_key", "poison", "drop_tensor", "reshape"]))
    if kind == "value":
        return {"meta": {draw(st.sampled_from(keys)): draw(value)}}
    if kind == "drop_key":
        return {"drop": [draw(st.sampled_from(keys))]}
    name = draw(st.sampled_from(names))
    if kind == "drop_tensor":
        return {"drop": [name]}
    if kind == "poison":
        bad = draw(st.sampled_from([math.nan, math.inf, -math.inf, 1e30]))
        return {"tensors": {name: poison(bad, draw(st.integers(0, 1 << 16)))}}
    return {"tensors": {name: reshaped(draw(st.sampled_from(["first", "last", "flat"])))}}
