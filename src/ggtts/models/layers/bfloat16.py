"""Convolutions that multiply in bfloat16 and give float32 back, for the vocoders that offer ``precision="bfloat16"``
where the CPU multiplies bfloat16 natively (AVX-512 BF16, AMX): Kokoro's and Piper's.

Each is its ``nn`` class's drop-in (same parameters, same state-dict names): the bfloat16 weight and bias are
copies of the float32 ones, made again whenever those change (new values, another device), kept as plain
attributes so neither the state dict nor ``.float()`` sees them. The activations between layers stay float32.
"""

from __future__ import annotations

from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["BFloat16Conv1d", "BFloat16ConvTranspose1d", "to_bfloat16", "weight_version"]


def weight_version(t: torch.Tensor) -> int | None:
    """A tensor's version counter (what changes when it is written in place); None for an inference tensor (made
    under ``torch.inference_mode``: it has none, and cannot be changed in place outside that mode)."""
    return None if t.is_inference() else t._version


class _BFloat16Weights:
    weight: torch.Tensor
    bias: torch.Tensor | None

    def _bfloat16(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        weight, bias = self.weight, self.bias
        version = weight_version
        key = (version(weight), weight.data_ptr(), None if bias is None else (version(bias), bias.data_ptr()))
        cached = self.__dict__.get("_bf16_cache")
        if cached is None or cached[0] != key:
            copies = (weight.detach().to(torch.bfloat16), None if bias is None else bias.detach().to(torch.bfloat16))
            # the tensors copied are held, so that a weight replaced later cannot take their memory's address
            held = (weight.detach(), None if bias is None else bias.detach())
            self.__dict__["_bf16_cache"] = cached = (key, copies, held)
        return cast(tuple[torch.Tensor, torch.Tensor | None], cached[1])

    def _weights(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        if torch.compiler.is_compiling():  # the copies made before compiling (no graph break on the check)
            return cast(tuple[torch.Tensor, torch.Tensor | None], self.__dict__["_bf16_cache"][1])
        return self._bfloat16()


class BFloat16Conv1d(_BFloat16Weights, nn.Conv1d):
    """An ``nn.Conv1d`` that convolves in bfloat16 and returns the input's dtype."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight, bias = self._weights()
        y = F.conv1d(x.to(torch.bfloat16), weight, bias, self.stride, self.padding, self.dilation, self.groups)
        return y.to(x.dtype)


class BFloat16ConvTranspose1d(_BFloat16Weights, nn.ConvTranspose1d):
    """An ``nn.ConvTranspose1d`` that convolves in bfloat16 and returns the input's dtype."""

    def forward(self, x: torch.Tensor, output_size: list[int] | None = None) -> torch.Tensor:
        if output_size is not None:
            raise NotImplementedError("an output size is not taken here: the layer's output_padding holds")
        weight, bias = self._weights()
        y = F.conv_transpose1d(
            x.to(torch.bfloat16), weight, bias, self.stride, cast(tuple[int], self.padding), self.output_padding,
            self.groups,
            self.dilation,
        )  # fmt: skip
        return y.to(x.dtype)


def to_bfloat16(module: nn.Module) -> int:
    """Turn the plain ``nn.Conv1d`` (zero-padded) and ``nn.ConvTranspose1d`` layers in ``module`` into their bfloat16
    drop-ins, in place, making the bfloat16 copies now; returns how many."""
    count = 0
    for layer in module.modules():
        if type(layer) is nn.Conv1d and layer.padding_mode == "zeros":  # forward pads as conv1d does
            layer.__class__ = BFloat16Conv1d
        elif type(layer) is nn.ConvTranspose1d and layer.padding_mode == "zeros":
            layer.__class__ = BFloat16ConvTranspose1d
        else:
            continue
        cast(_BFloat16Weights, layer)._bfloat16()
        count += 1
    return count
