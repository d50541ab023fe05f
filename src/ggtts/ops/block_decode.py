"""GGUF block types decoded by torch, on whatever device the blocks are: the numbers of gguf-py's ``dequantize``
(llama.cpp's Python port of ggml's reference dequantizers), to the bit, in float32.

A stored row of blocks is split once, on the host, into its fields (:data:`LAYOUTS`: each block's float16 scales,
its packed integers...), each a tensor of ``(rows, blocks)`` or ``(rows, blocks, bytes)``: rows can then be sliced
or gathered without touching the bytes of the others, and the fields together are exactly the stored bytes.
:func:`decode` turns the fields of some rows into ``(rows, cols)`` float32, in the same float operations as gguf-py
in the same order (so the products are bit-exact); the integer unpacking is plain shifts and masks, which a
captured CUDA graph or ``torch.compile`` takes as they are (no host value is read, and the only constant, the
IQ4 grid, is given as a tensor).

Covered: the legacy types (Q8_0, Q5_1, Q5_0, Q4_1, Q4_0), the K-quants (Q6_K, Q5_K, Q4_K, Q3_K, Q2_K) and the
4-bit non-linear i-quants (IQ4_NL, IQ4_XS): every type of llama.cpp's ``Q*_K_*`` and ``IQ4_*`` mixes and of ggtts's
converters. The other i-quants (lattice grids), the ternary types and the FP4 ones are not.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf import quants as gguf_quants

__all__ = ["DECODED_TYPES", "LAYOUTS", "Field", "decode", "grid", "split"]

Q = GGMLQuantizationType
QK_K = 256  # a K-quant super-block's values


@dataclass(frozen=True)
class Field:
    """A field of a block: ``size`` bytes, read as ``kind``: ``"f16"`` (one float16 scale, kept as its bits in
    an int16), ``"u8"`` or ``"i8"`` (bytes)."""

    name: str
    size: int
    kind: str = "u8"


def _f16(name: str) -> Field:
    return Field(name, 2, "f16")


# Each type's block, field by field, in storage order (ggml-common.h's block structs)
LAYOUTS: dict[GGMLQuantizationType, tuple[Field, ...]] = {
    Q.Q8_0: (_f16("d"), Field("qs", 32, "i8")),
    Q.Q5_1: (_f16("d"), _f16("m"), Field("qh", 4), Field("qs", 16)),
    Q.Q5_0: (_f16("d"), Field("qh", 4), Field("qs", 16)),
    Q.Q4_1: (_f16("d"), _f16("m"), Field("qs", 16)),
    Q.Q4_0: (_f16("d"), Field("qs", 16)),
    Q.Q6_K: (Field("ql", 128), Field("qh", 64), Field("scales", 16, "i8"), _f16("d")),
    Q.Q5_K: (_f16("d"), _f16("dmin"), Field("scales", 12), Field("qh", 32), Field("qs", 128)),
    Q.Q4_K: (_f16("d"), _f16("dmin"), Field("scales", 12), Field("qs", 128)),
    Q.Q3_K: (Field("hmask", 32), Field("qs", 64), Field("scales", 12), _f16("d")),
    Q.Q2_K: (Field("scales", 16), Field("qs", 64), _f16("d"), _f16("dmin")),
    Q.IQ4_NL: (_f16("d"), Field("qs", 16)),
    Q.IQ4_XS: (_f16("d"), Field("scales_h", 2), Field("scales_l", 4), Field("qs", 128)),
}
DECODED_TYPES = tuple(LAYOUTS)
_NP = {"f16": np.int16, "u8": np.uint8, "i8": np.int8}

for _qtype, _fields in LAYOUTS.items():  # the layouts add up to the block sizes gguf knows
    assert sum(f.size for f in _fields) == GGML_QUANT_SIZES[_qtype][1], _qtype.name


def split(raw: np.ndarray, qtype: GGMLQuantizationType, rows: int, cols: int) -> dict[str, np.ndarray]:
    """A stored ``(rows, cols)`` weight's bytes -> its fields: ``(rows, blocks)`` int16 for a float16 scale,
    ``(rows, blocks, size)`` bytes for the others (contiguous copies: together the stored bytes, no more)."""
    if qtype not in LAYOUTS:
        raise ValueError(f"{qtype.name} blocks are not decoded by torch (only {_names()})")
    block, size = GGML_QUANT_SIZES[qtype]
    if cols % block:
        raise ValueError(f"{qtype.name} rows of {cols} values are not whole blocks of {block}")
    blocks = np.ascontiguousarray(raw).view(np.uint8).reshape(rows, cols // block, size)
    fields, start = {}, 0
    for field in LAYOUTS[qtype]:
        part = np.ascontiguousarray(blocks[:, :, start : start + field.size]).view(_NP[field.kind])
        fields[field.name] = part[..., 0] if field.kind == "f16" else part
        start += field.size
    return fields


def _names() -> str:
    return ", ".join(t.name for t in DECODED_TYPES)


def grid(qtype: GGMLQuantizationType) -> torch.Tensor | None:
    """The values a type's indices stand for (IQ4's non-linear 16), as int8 (as ggml's table: a model's
    ``.to(dtype)`` leaves it alone); None for the linear types."""
    if qtype in (Q.IQ4_NL, Q.IQ4_XS):
        return torch.tensor(gguf_quants.IQ4_NL.kvalues, dtype=torch.int8)
    return None


def _looked_up(grid: torch.Tensor | None, q: torch.Tensor) -> torch.Tensor:
    """The grid's values (int8) of the 4-bit indices ``q`` (a 4-byte index each, not 8)."""
    assert grid is not None
    return grid.index_select(0, q.flatten().int()).view(q.shape)


def _half(bits: torch.Tensor) -> torch.Tensor:
    """A field of float16 bits ``(n,)`` -> ``(n, 1)`` float32."""
    return bits.view(torch.float16).float()[:, None]


def _shifts(step: int, count: int, like: torch.Tensor) -> torch.Tensor:
    """``0, step, ... `` (``count`` of them) shaped to shift a ``(..., 1, bytes)`` field: made on the field's
    device by a kernel (no host copy, so a graph capture takes it)."""
    return torch.arange(0, step * count, step, dtype=like.dtype, device=like.device)[:, None]


def _nibbles(b: torch.Tensor) -> torch.Tensor:
    """Bytes ``(..., n)`` -> ``(..., 2, n)``: each byte's low nibbles, then its high ones."""
    return (b[..., None, :] >> _shifts(4, 2, b)) & 0x0F


def _crumbs(b: torch.Tensor) -> torch.Tensor:
    """Bytes ``(..., n)`` -> ``(..., 4, n)``: each byte's 2-bit fields from the lowest."""
    return (b[..., None, :] >> _shifts(2, 4, b)) & 0x03


def _bits(b: torch.Tensor) -> torch.Tensor:
    """Bytes ``(..., n)`` -> ``(..., 8, n)``: each byte's bits from the lowest."""
    return (b[..., None, :] >> _shifts(1, 8, b)) & 0x01


# The integers stay small (uint8, int8) until one product with their float32 scales turns them into float32 (torch's
# type promotion: exact, as a conversion first would be, without a float copy of them in memory); only the types with
# a min add a second float pass. The order of the float operations is gguf-py's.


def _q8_0(f: dict[str, torch.Tensor], _grid: torch.Tensor | None) -> torch.Tensor:
    return f["qs"] * _half(f["d"])


def _q4_0(f: dict[str, torch.Tensor], _grid: torch.Tensor | None) -> torch.Tensor:
    q = _nibbles(f["qs"]).flatten(1)  # value j: byte j's low nibble, value j + 16: its high one
    return _half(f["d"]) * (q.view(torch.int8) - 8)


def _q4_1(f: dict[str, torch.Tensor], _grid: torch.Tensor | None) -> torch.Tensor:
    return _half(f["d"]) * _nibbles(f["qs"]).flatten(1) + _half(f["m"])


def _five_bits(f: dict[str, torch.Tensor]) -> torch.Tensor:
    """Q5_0 / Q5_1 values 0..31: the nibbles, and bit ``j`` of the little-endian 32-bit ``qh`` as value j's fifth."""
    high = _bits(f["qh"]).transpose(-1, -2).flatten(1)  # (n, 4 bytes, 8 bits): bit j is byte j // 8's bit j % 8
    return _nibbles(f["qs"]).flatten(1) | (high << 4)


def _q5_0(f: dict[str, torch.Tensor], _grid: torch.Tensor | None) -> torch.Tensor:
    return _half(f["d"]) * (_five_bits(f).view(torch.int8) - 16)


def _q5_1(f: dict[str, torch.Tensor], _grid: torch.Tensor | None) -> torch.Tensor:
    return _half(f["d"]) * _five_bits(f) + _half(f["m"])


def _q2_k(f: dict[str, torch.Tensor], _grid: torch.Tensor | None) -> torch.Tensor:
    n, sc = f["d"].shape[0], f["scales"]  # 16 sub-blocks of 16: a 4-bit scale and a 4-bit min each
    dl = (_half(f["d"]) * (sc & 0x0F).float())[..., None]
    ml = (_half(f["dmin"]) * (sc >> 4).float())[..., None]
    q = _crumbs(f["qs"].view(n, 2, 32)).reshape(n, 16, 16)  # (2 halves, 4 shifts, 32) in value order
    return (dl * q - ml).reshape(n, QK_K)


def _q3_k(f: dict[str, torch.Tensor], _grid: torch.Tensor | None) -> torch.Tensor:
    n, sc = f["d"].shape[0], f["scales"]
    low = _nibbles(sc[:, :8]).reshape(n, 16)  # scale i's low 4 bits: byte i % 8, its low nibble for i < 8
    high = _crumbs(sc[:, 8:]).reshape(n, 16)  # its top 2 bits: byte 8 + i % 4, the 2-bit field i // 4
    scales = (low | (high << 4)).float() - 32.0
    dl = (_half(f["d"]) * scales)[..., None]
    ql = _crumbs(f["qs"].view(n, 2, 32)).reshape(n, 16, 16)
    qh = _bits(f["hmask"][:, None, :]).reshape(n, 16, 16) ^ 1  # a clear mask bit subtracts 4
    q = ql.view(torch.int8) - (qh << 2).view(torch.int8)  # -4..3
    return (dl * q).reshape(n, QK_K)


def _scale_min_k4(sc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Q4_K / Q5_K's 12 bytes -> 8 six-bit scales and 8 six-bit mins: bytes 0-3 and 4-7 hold the first four's
    and their top 2 bits carry the last four's high bits, whose low 4 bits are bytes 8-11's nibbles."""
    d, m, m_d = sc[:, 0:4], sc[:, 4:8], sc[:, 8:12]
    scales = torch.cat((d & 0x3F, (m_d & 0x0F) | ((d >> 2) & 0x30)), dim=-1)
    mins = torch.cat((m & 0x3F, (m_d >> 4) | ((m >> 2) & 0x30)), dim=-1)
    return scales, mins


def _q4_k(f: dict[str, torch.Tensor], _grid: torch.Tensor | None) -> torch.Tensor:
    n = f["d"].shape[0]
    sc, m = _scale_min_k4(f["scales"])
    d = (_half(f["d"]) * sc.float())[..., None]
    dm = (_half(f["dmin"]) * m.float())[..., None]
    q = _nibbles(f["qs"].view(n, 4, 32)).reshape(n, 8, 32)  # sub-block 2k: bytes 32k.. low, 2k+1: high
    return (d * q - dm).reshape(n, QK_K)


def _q5_k(f: dict[str, torch.Tensor], _grid: torch.Tensor | None) -> torch.Tensor:
    n = f["d"].shape[0]
    sc, m = _scale_min_k4(f["scales"])
    d = (_half(f["d"]) * sc.float())[..., None]
    dm = (_half(f["dmin"]) * m.float())[..., None]
    ql = _nibbles(f["qs"].view(n, 4, 32)).reshape(n, 8, 32)
    qh = _bits(f["qh"][:, None, :]).reshape(n, 8, 32)  # sub-block i's fifth bits: bit i of the 32 bytes
    return (d * (ql | (qh << 4)) - dm).reshape(n, QK_K)


def _q6_k(f: dict[str, torch.Tensor], _grid: torch.Tensor | None) -> torch.Tensor:
    n = f["d"].shape[0]
    d = (_half(f["d"]) * f["scales"].float())[..., None]  # 16 sub-blocks of 16, an 8-bit signed scale each
    ql = _nibbles(f["ql"].view(n, 2, 64)).reshape(n, 8, 32)
    qh = _crumbs(f["qh"].view(n, 2, 32)).reshape(n, 8, 32)
    q = ((ql | (qh << 4)).view(torch.int8) - 32).reshape(n, 16, 16)
    return (d * q).reshape(n, QK_K)


def _iq4_nl(f: dict[str, torch.Tensor], grid: torch.Tensor | None) -> torch.Tensor:
    return _half(f["d"]) * _looked_up(grid, _nibbles(f["qs"]).flatten(1))


def _iq4_xs(f: dict[str, torch.Tensor], grid: torch.Tensor | None) -> torch.Tensor:
    n = f["d"].shape[0]
    low = _nibbles(f["scales_l"]).transpose(-1, -2).reshape(n, 8)  # sub-block i: byte i // 2, nibble i % 2
    h = f["scales_h"].to(torch.int32)
    high = (((h[:, 0] | (h[:, 1] << 8))[:, None] >> _shifts(2, 8, h)[:, 0]) & 0x03).to(torch.uint8)  # 16 bits, 2 each
    dl = (_half(f["d"]) * ((low | (high << 4)).float() - 32.0))[..., None]
    q = _nibbles(f["qs"].view(n, 8, 16)).reshape(n, 8, 32)  # sub-block i: bytes 16i.., low nibbles then high
    return (dl * _looked_up(grid, q)).reshape(n, QK_K)


_DECODERS: dict[GGMLQuantizationType, Callable[[dict[str, torch.Tensor], torch.Tensor | None], torch.Tensor]] = {
    Q.Q8_0: _q8_0, Q.Q5_1: _q5_1, Q.Q5_0: _q5_0, Q.Q4_1: _q4_1, Q.Q4_0: _q4_0,
    Q.Q6_K: _q6_k, Q.Q5_K: _q5_k, Q.Q4_K: _q4_k, Q.Q3_K: _q3_k, Q.Q2_K: _q2_k,
    Q.IQ4_NL: _iq4_nl, Q.IQ4_XS: _iq4_xs,
}  # fmt: skip
assert set(_DECODERS) == set(LAYOUTS)


def decode(
    qtype: GGMLQuantizationType, fields: dict[str, torch.Tensor], cols: int, grid: torch.Tensor | None = None
) -> torch.Tensor:
    """The fields of some rows (as :func:`split` made them, any leading rows sliced or gathered) -> ``(rows,
    cols)`` float32. ``grid``: :func:`grid`'s table on the fields' device, for the IQ4 types."""
    first = fields[LAYOUTS[qtype][0].name]
    rows, n_blocks = first.shape[:2]
    flat = {name: t.reshape(rows * n_blocks, *t.shape[2:]) for name, t in fields.items()}
    return _DECODERS[qtype](flat, grid).reshape(rows, cols)
