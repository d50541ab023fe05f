"""The operation counter behind ``benchmarks/step_operations.py`` and the fused-steps test: it counts what makes or
writes a tensor, and nothing that only views one."""

from __future__ import annotations

import torch

from ggtts.measure.operations import Operations


def test_counts_what_makes_or_writes_a_tensor_and_not_views() -> None:
    x = torch.randn(4, 6)
    w = torch.randn(5, 6)
    with Operations() as ops:
        y = x.view(2, 12).transpose(0, 1)[3:]  # views: nothing launched
        same = x.float()  # already float32: returns its input
        z = torch.nn.functional.linear(x, w) + 1.0
        z.mul_(2.0)
        picked = w.index_select(0, torch.tensor([0, 3]))
    assert y.shape == (9, 2) and same is x and picked.shape == (2, 6)
    assert ops.counts["view"] == ops.counts["transpose"] == ops.counts["slice"] == 0
    assert ops.counts["linear"] + ops.counts["addmm"] + ops.counts["mm"] == 1
    assert ops.counts["add"] == 1 and ops.counts["mul_"] == 1 and ops.counts["index_select"] == 1
    assert ops.products == 2
    assert ops.total == sum(ops.counts.values())


def test_traffic_is_each_operations_inputs_read_and_outputs_written() -> None:
    a, b = torch.randn(1000), torch.randn(1000)
    with Operations() as ops:
        c = a + b  # reads 2 x 4000 bytes, writes 4000
        half = c.to(torch.float16)  # reads 4000, writes 2000
        c.mul_(2.0)  # reads and writes its 4000
        c.view(10, 100)  # a view: nothing
    assert half.dtype == torch.float16
    assert ops.traffic == 12_000 + 6_000 + 8_000
    with Operations() as ops:
        torch.cat([a, b])  # tensors in a list: reads 2 x 4000 bytes, writes 8000
    assert ops.traffic == 16_000
    c = torch.empty(1000)
    with Operations() as ops:
        torch.add(a, b, out=c)  # out=: written, not read
    assert ops.counts["add"] == 1 and ops.traffic == 12_000
