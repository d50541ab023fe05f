"""Linear layers through oneDNN with their weights packed once, on a CPU: Kokoro's PL-BERT.

A short input (a sentence's few tokens) through ``F.linear`` goes to MKL's general matrix
product, which at a handful of rows reads the weight at a fraction of the memory's speed: Kokoro's ALBERT over 7
tokens (its one layer of 5.5 M weights run 12 times) took 38 ms on a 2-core AMD EPYC Zen 4. oneDNN's inner product
over the same weight, reordered once into its blocked layout (``torch.ops.mkldnn._reorder_linear_weight``, as
torch's own CPU compiler does for frozen weights), took 15 ms; over 50 to 500 rows it stays 1.2-1.5x faster
(measured on the same CPU, ``F.linear`` against this, random weights of ALBERT's shapes). The sums are the same
products in another order: outputs differ by float rounding (at most 5.6e-6 where ALBERT's outputs reach 11.6).

:func:`packed_linears` turns a module's ``nn.Linear`` layers into :class:`PackedLinear`, their drop-in (same
parameters, same state-dict names). The packed copy is kept as a plain attribute (neither the state dict nor
``.to()`` sees it, nor ``copy.deepcopy`` or pickle), made on first use and again when the weight changes
(:meth:`PackedLinear._packed` says which changes are seen); it costs the weight's size again in memory. Anything but
a float32 input and weight on a CPU runs ``F.linear`` as before, and so do a bias that is not dense float32 (oneDNN
would read it as if it were), autograd (the packed product has no backward), autocast, oneDNN switched off
(``torch.backends.mkldnn.flags(enabled=False)``) or missing, and a compiled graph (which packs for itself).
"""

from __future__ import annotations

import functools
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from ggtts.models.layers.bfloat16 import weight_version

__all__ = ["PACK_ROWS_HINT", "PackedLinear", "packed_linears"]

PACK_ROWS_HINT = 64  # the rows oneDNN is told to expect when it packs: the fastest at 1-500 rows of those measured


@functools.cache  # asked on every product: the answer is the torch build's
def _available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")


class PackedLinear(nn.Linear):
    """An ``nn.Linear`` whose float32 products on a CPU go through oneDNN with the weight packed once."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight, bias = self.weight, self.bias
        if (
            x.device.type != "cpu"
            or x.dtype != torch.float32
            or weight.dtype != torch.float32
            or weight.device.type != "cpu"
            # oneDNN reads the bias as dense float32, whatever its strides
            or (bias is not None and (bias.dtype != torch.float32 or not bias.is_contiguous()))
            or (torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias)))
            or torch.is_autocast_enabled("cpu")
            or not torch.backends.mkldnn.enabled  # torch.backends.mkldnn.flags(enabled=False)
            or torch.compiler.is_compiling()
            or not _available()
        ):
            return F.linear(x, weight, bias)
        return torch.ops.mkldnn._linear_pointwise(x, self._packed(), bias, "none", [], "")

    def __getstate__(self) -> dict[str, object]:
        """Copied or pickled without the packed weight (an opaque oneDNN tensor neither can copy): packed again on
        the copy's first use."""
        state = dict(super().__getstate__())
        state.pop("_packed_cache", None)
        return state

    def _packed(self) -> torch.Tensor:
        """The packed weight, made again when the weight's values may have changed: written in place (its version
        counter moved) or another tensor (its address changed; the tensor packed is held, so that its memory cannot
        be freed and reused at the same address). An inference tensor has no version counter: writing one in place
        after the first call is not seen."""
        weight = self.weight
        key = (weight_version(weight), weight.data_ptr())
        cached = self.__dict__.get("_packed_cache")
        if cached is None or cached[0] != key:
            with torch.inference_mode(weight.is_inference()):
                held = weight.detach()
                packed = torch.ops.mkldnn._reorder_linear_weight(held, PACK_ROWS_HINT)
            self.__dict__["_packed_cache"] = cached = (key, packed, held)
        return cast(torch.Tensor, cached[1])


def packed_linears(module: nn.Module) -> int:
    """Turn the ``nn.Linear`` layers of ``module`` into :class:`PackedLinear` (in place; packed on first use);
    returns how many. Nothing where torch has no oneDNN."""
    if not _available():
        return 0
    count = 0
    for layer in module.modules():
        if type(layer) is nn.Linear:
            layer.__class__ = PackedLinear
            count += 1
    return count
