"""The Qwen blocks' kernels a GPU step graph holds: the RMS norm and the rotation against transformers' own
(exactly), and the fused projections (queries, keys and values as one product, SwiGLU's gate and up, an expert
stack's gate and up, the router with the shared expert's gate) against the same blocks unfused."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from transformers import Qwen3Config
from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm, Qwen3RotaryEmbedding, apply_rotary_pos_emb

from ggtts.models.layers.fused import fuse_rows, still_fused
from ggtts.models.layers.kv_cache import KVCache
from ggtts.models.layers.qwen3 import Attention, Block, DenseFFN, SparseMoE, fuse_projections
from ggtts.models.layers.transformer import RMSNorm, RotaryEmbedding, StaticPosition
from ggtts.ops.stored_experts import Experts

DIM, HEADS, KV_HEADS, HEAD_DIM, EPS = 48, 4, 2, 16, 1e-6
N_EXPERT, N_USED, N_FF_EXP, N_FF_SHEXP, N_FF = 8, 3, 20, 28, 40
CAPACITY = 16


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rms_norm_is_transformers_qwen3_norm_to_the_bit(dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(3, 5, DIM, generator=g) * 4).to(dtype)
    theirs = Qwen3RMSNorm(DIM, EPS).to(dtype)
    ours = RMSNorm(DIM, EPS).to(dtype)
    with torch.no_grad():
        theirs.weight.copy_(torch.randn(DIM, generator=g))
        ours.weight.copy_(theirs.weight)
        assert torch.equal(ours(x), theirs(x))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_rotation_is_transformers_to_the_bit(dtype: torch.dtype) -> None:
    """``roll`` against the signed sine table is transformers' ``rotate_half`` rotation exactly, from a start
    position and from positions read from tensors (one, or a row each)."""
    config = Qwen3Config(head_dim=HEAD_DIM, hidden_size=DIM, num_attention_heads=HEADS, max_position_embeddings=64,
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0})  # fmt: skip
    theirs = Qwen3RotaryEmbedding(config)
    ours = RotaryEmbedding(HEAD_DIM, 10000.0, 64)
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, HEADS, 5, HEAD_DIM, generator=g).to(dtype)
    k = torch.randn(2, KV_HEADS, 5, HEAD_DIM, generator=g).to(dtype)
    start = 11
    cos, sin = theirs(q, torch.arange(start, start + 5).expand(2, -1))
    want_q, want_k = apply_rotary_pos_emb(q, k, cos, sin)
    assert torch.equal(ours(q, start), want_q) and torch.equal(ours(k, start), want_k)

    positions = torch.arange(64)
    one = StaticPosition.at(torch.tensor([start + 4]), positions, ours)
    assert torch.equal(ours(q[:1, :, 4:], one), want_q[:1, :, 4:])
    rows = StaticPosition.rows(torch.tensor([start + 2, start + 4]), torch.tensor([True, True]), positions, ours)
    got = ours(torch.stack((q[0, :, 2:3], q[1, :, 4:5])), rows)
    assert torch.equal(got, torch.stack((want_q[0, :, 2:3], want_q[1, :, 4:5])))


def _block(ffn: str, seed: int) -> Block:
    torch.manual_seed(seed)
    if ffn == "moe":
        part: nn.Module = SparseMoE(DIM, N_EXPERT, N_USED, N_FF_EXP, norm_topk_prob=False, n_ff_shexp=N_FF_SHEXP)
    else:
        part = DenseFFN(DIM, N_FF)
    block = Block(DIM, EPS, Attention(DIM, HEADS, KV_HEADS, HEAD_DIM, EPS), part).eval()
    with torch.no_grad():
        for p in block.parameters():
            p.normal_(0, 0.3 if p.dim() > 1 else 1.0)  # norms' weights away from 1: a swapped one shows
    return block


def _run(block: Block, x: torch.Tensor, gather: bool) -> torch.Tensor:
    """A prompt of all rows but the last from position 0, then the last row as a GPU's static step (the position
    read from tensors, the whole cache under a mask, one row's experts gathered when ``gather``): both outputs."""
    for m in block.modules():
        if isinstance(m, Experts):
            m.gather = gather
    rope = RotaryEmbedding(HEAD_DIM, 10000.0, CAPACITY)
    cache = KVCache(1, KV_HEADS, HEAD_DIM, CAPACITY)
    with torch.inference_mode():
        prompt = block(x[:, :-1], rope, cache, 0, 0)
        cache.advance(x.shape[1] - 1)
        at = StaticPosition.at(torch.tensor([x.shape[1] - 1]), torch.arange(CAPACITY), rope)
        return torch.cat((prompt, block(x[:, -1:], rope, cache, 0, at)), dim=1)


def _relative(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).abs().max() / want.abs().max())


@pytest.mark.parametrize("ffn", ["moe", "dense"])
@pytest.mark.parametrize("gather", [True, False])
def test_fused_blocks_give_the_unfused_blocks_outputs(ffn: str, gather: bool) -> None:
    """Every projection fused (the weights views of one tensor each), the block's outputs over a prompt and a static
    one-row step are the unfused block's, to float32's rounding of products summed in another order (measured
    ~1e-7 of the peak)."""
    plain = _block(ffn, seed=3)
    fused = copy.deepcopy(plain)
    assert fuse_projections([fused]) == 2
    attn = fused.attn
    assert still_fused(attn.qkv, [attn.attn_q, attn.attn_k, attn.attn_v])
    if ffn == "moe":
        moe = fused.ffn
        assert isinstance(moe, SparseMoE)
        assert moe.gate_up_exps is not None and moe.router is not None and moe.gate_up_shexp is not None
    x = torch.randn(1, 7, DIM, generator=torch.Generator().manual_seed(4))
    want, got = _run(plain, x, gather), _run(fused, x, gather)
    error = _relative(got, want)
    print(f"{ffn}, gather {gather}: {error:.1e}")
    assert error < 1e-5
    assert fused.state_dict().keys() == plain.state_dict().keys()
    assert all(torch.equal(a, b) for a, b in zip(fused.state_dict().values(), plain.state_dict().values(), strict=True))


def test_fused_weights_are_views_that_follow_loads_and_moves() -> None:
    """The fused tensors hold the weights once (each module's weight a view of its part); a state dict loaded in
    place reaches them; a weight given storage of its own (``.to()``, ``assign=True``) ends the fused path: the
    block then runs its modules as they are, with the new weights."""
    fused, other = _block("moe", seed=5), _block("moe", seed=6)
    fuse_projections([fused])
    attn, moe = fused.attn, fused.ffn
    assert isinstance(moe, SparseMoE) and attn.qkv is not None and moe.gate_up_exps is not None
    params = sum(p.numel() for p in fused.parameters())
    assert attn.attn_k.weight.untyped_storage().data_ptr() == attn.qkv.weight.untyped_storage().data_ptr()
    assert moe.ffn_up_exps.weight.untyped_storage().data_ptr() == moe.gate_up_exps.weight.untyped_storage().data_ptr()
    x = torch.randn(1, 5, DIM, generator=torch.Generator().manual_seed(7))

    fused.load_state_dict(other.state_dict())  # in place: into the views
    assert still_fused(attn.qkv, [attn.attn_q, attn.attn_k, attn.attn_v])
    assert _relative(_run(fused, x, True), _run(other, x, True)) < 1e-5

    third = _block("moe", seed=8)
    fused.load_state_dict(third.state_dict(), assign=True)  # each weight its own storage again
    assert not still_fused(attn.qkv, [attn.attn_q, attn.attn_k, attn.attn_v])
    assert not still_fused(moe.gate_up_exps, [moe.ffn_gate_exps, moe.ffn_up_exps], dim=1)
    assert torch.equal(_run(fused, x, True), _run(third, x, True))  # the modules' own path: the same arithmetic
    assert sum(p.numel() for p in fused.parameters()) == params

    moved = _block("dense", seed=9)
    fuse_projections([moved])
    moved = moved.to(torch.float64)
    want = _block("dense", seed=9).to(torch.float64)
    assert torch.equal(_run(moved, x.double(), True), _run(want, x.double(), True))


def test_a_stale_fusion_is_dropped_and_a_trace_checks_the_parameters() -> None:
    """Run eagerly, a block whose weights moved drops its fused tensors (not kept alive beside the new weights) and
    runs its modules; traced by ``torch.compile`` (where storage cannot be read), the check is that each layer holds
    the parameter the fusion gave it: a state dict assigned after the fusion is seen there too."""
    block = _block("dense", seed=12)
    fuse_projections([block])
    attn, ffn = block.attn, block.ffn
    assert isinstance(ffn, DenseFFN) and attn.qkv is not None and ffn.gate_up is not None
    parts = [attn.attn_q, attn.attn_k, attn.attn_v]

    def traced() -> bool:
        return still_fused(attn.qkv, parts)

    assert torch.compile(traced, backend="eager", fullgraph=True)()
    torch._dynamo.reset()
    block.load_state_dict(_block("dense", seed=13).state_dict(), assign=True)
    assert not torch.compile(traced, backend="eager", fullgraph=True)()
    torch._dynamo.reset()
    _run(block, torch.randn(1, 4, DIM), gather=True)
    assert attn.qkv is None and ffn.gate_up is None  # dropped: the modules' own weights from now on
    assert fuse_projections([block]) == 2 and still_fused(attn.qkv, parts)  # fused again on asking


def test_only_plain_float_layers_fuse_and_their_biases_with_them() -> None:
    """Linear layers fuse with their biases (all or none biased); an expert stack along its rows; nothing else."""
    torch.manual_seed(10)
    biased = [nn.Linear(4, 3), nn.Linear(4, 5)]
    x = torch.randn(2, 4)
    want = torch.cat([m(x) for m in biased], dim=-1)
    fused = fuse_rows(biased)
    assert fused is not None and fused.bias is not None and still_fused(fused, biased)
    assert torch.allclose(fused(x), want, rtol=1e-6, atol=1e-6)
    assert torch.equal(torch.cat([m(x) for m in biased], dim=-1), want)  # each layer alone as before, on its views
    biased[1].bias = nn.Parameter(torch.zeros(5))  # a bias of its own: the fused path no longer stands
    assert not still_fused(fused, biased)

    plain = [nn.Linear(4, 3, bias=False), nn.Linear(4, 3, bias=False)]
    before = [m.weight for m in plain]
    assert fuse_rows([plain[0], nn.Linear(4, 3)]) is None and plain[0].weight is before[0]  # biased and not
    assert fuse_rows([nn.Linear(4, 3, bias=False), nn.Linear(5, 3, bias=False)]) is None  # inputs differ
    assert fuse_rows([nn.Linear(4, 3, bias=False), nn.Linear(4, 3, bias=False).double()]) is None
    assert fuse_rows([nn.Linear(4, 3, bias=False), nn.Embedding(3, 4)]) is None
    assert [m.weight for m in plain] == before
    stacks = [Experts(4, 3, 5), Experts(4, 2, 5)]
    experts = fuse_rows(stacks, dim=1)
    assert experts is not None and experts.weight.shape == (4, 5, 5) and still_fused(experts, stacks, dim=1)
    assert fuse_rows([Experts(4, 3, 5), Experts(2, 3, 5)], dim=1) is None  # expert counts differ
