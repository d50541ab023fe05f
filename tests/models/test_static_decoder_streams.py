"""The talker families' speech decoders streaming over fixed tensors (:mod:`ggtts.models.qwen3omni_code2wav.
static_stream`: on a GPU each push size a captured graph), run eagerly: the samples of an ordinary stream pushed the
same frames, on random decoders of the published structure at a small width, with a short attention window so that
pushes slide past it."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch

from ggtts.models.layers.fixed_state import FIRST
from ggtts.models.qwen3omni_code2wav.config import Code2WavConfig
from ggtts.models.qwen3omni_code2wav.model import Code2Wav, Code2WavStream, StreamingDecoder
from ggtts.models.qwen3omni_code2wav.static_stream import StaticDecoderStream
from ggtts.models.qwen3tts.config import DecoderConfig
from ggtts.models.qwen3tts.decoder import SpeechDecoder
from near_ties import relative_difference

SHAPE: dict[str, Any] = dict(num_quantizers=16, hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
                             num_key_value_heads=2, head_dim=16, intermediate_size=128, sliding_window=6,
                             rope_theta=10000.0, rms_norm_eps=1e-5, upsampling_ratios=(2, 2),
                             upsample_rates=(8, 5, 4, 3), decoder_dim=64)  # fmt: skip
SIZES = (12, 4, 2, 1)
# a static stream's samples against an ordinary stream's (of the peak): measured 3.0e-6 (code2wav) and 6.2e-7 (the
# 12 Hz decoder) on Zen 4, the products and attention over other lengths; a push attending to the zeros before the
# stream's start, or without the first push's trims, is off by far more (or by its length)
REL = 1e-5


def _decoder(kind: str) -> StreamingDecoder:
    torch.manual_seed(0)
    decoder: StreamingDecoder
    if kind == "code2wav":
        decoder = Code2Wav(Code2WavConfig(codebook_size=64, **SHAPE)).prepare()
    else:
        decoder = SpeechDecoder(DecoderConfig(codebook_size=64, codebook_dim=32, latent_dim=64, sample_rate=24000,
                                              **SHAPE)).prepare()  # fmt: skip
    with torch.no_grad():
        for p in decoder.parameters():
            p.normal_(0, 0.1)
    decoder.use_static_streams(SHAPE["num_quantizers"], SIZES, capture=False)
    return decoder.eval()


def _pushed_alike(
    static: Code2WavStream, plain: Code2WavStream, codes: torch.Tensor, at: int, pushes: tuple[int, ...]
) -> float:
    """Both streams pushed ``codes`` from frame ``at`` in ``pushes``: each push's samples of the same length, and
    their largest difference (of the ordinary one's peak)."""
    worst = 0.0
    for n in pushes:
        got, want = static.push(codes[..., at : at + n]), plain.push(codes[..., at : at + n])
        assert got.shape == want.shape
        worst = max(worst, relative_difference(got, want))
        at += n
    return worst


@pytest.mark.parametrize("kind", ["code2wav", "12 Hz decoder"])
@pytest.mark.parametrize("pushes", [(1, 4, 13, 3, 12, 7), (13, 1, 2)])
def test_a_static_stream_gives_an_ordinary_streams_samples(kind: str, pushes: tuple[int, ...]) -> None:
    """Pushes of 1 to 13 frames (made of the fixed sizes, the first frame through a graph of its own), past the
    attention window: each push's samples are the ordinary stream's, the first push's trims included."""
    decoder = _decoder(kind)
    codes = torch.randint(0, 64, (1, 16, sum(pushes)), generator=torch.Generator().manual_seed(1))
    static, plain = decoder.fresh_stream(), decoder.stream()
    assert isinstance(static, StaticDecoderStream) and not isinstance(plain, StaticDecoderStream)
    worst = _pushed_alike(static, plain, codes, 0, pushes)
    print(f"{kind}: static against ordinary {worst:.1e}")
    assert worst < REL, worst


@pytest.mark.parametrize("kind", ["code2wav", "12 Hz decoder"])
def test_a_new_static_stream_starts_afresh_and_the_old_one_is_done(kind: str) -> None:
    decoder = _decoder(kind)
    codes = torch.randint(0, 64, (1, 16, 9), generator=torch.Generator().manual_seed(2))
    first = decoder.fresh_stream()
    first.push(codes[..., :7])
    second = decoder.fresh_stream()
    assert relative_difference(second.push(codes[..., :5]), decoder.stream().push(codes[..., :5])) < REL
    with pytest.raises(RuntimeError, match="replaced by a newer one"):
        first.push(codes[..., 7:])
    with pytest.raises(RuntimeError, match="fork an ordinary stream"):
        second.fork()
    with pytest.raises(RuntimeError, match="save an ordinary stream"):
        second.saved()
    copied = copy.deepcopy(decoder)  # a copy makes its own fixed tensors (the graphs read the decoder's own)
    assert copied.static is not None and copied.static is not decoder.static and copied.static.decoder is copied
    assert relative_difference(copied.fresh_stream().push(codes[..., :3]), decoder.stream().push(codes[..., :3])) < REL


@pytest.mark.parametrize("kind", ["code2wav", "12 Hz decoder"])
def test_each_push_size_traces_as_one_graph(kind: str) -> None:
    """Nothing in a push is read on the host (which would wait for the GPU, and which a CUDA graph cannot hold):
    each size's push, and the first frame's, trace as one graph with no break."""
    import torch._dynamo as dynamo

    decoder = _decoder(kind)
    decoder.fresh_stream().push(torch.zeros(1, 16, 1, dtype=torch.long))  # the lane made
    assert decoder.static is not None
    [lane] = decoder.static.lanes[1]
    assert sorted(lane.graphs) == sorted({FIRST, *SIZES})
    dynamo.reset()
    with torch.inference_mode():
        for graph in lane.graphs.values():
            explained = dynamo.explain(graph.step)()
            assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons


def test_an_ordinary_stream_resumed_without_its_attention_state_is_refused() -> None:
    """The zeros a fixed state's first push stands in for the attention's past are for static streams only: an
    ordinary stream resumed from a state that lacks the attention layers' keys fails at its push, as it always did,
    rather than decoding against zeros."""
    decoder = _decoder("code2wav")
    codes = torch.randint(0, 64, (1, 16, 6), generator=torch.Generator().manual_seed(3))
    stream = decoder.stream()
    stream.push(codes[..., :5])
    kept = {name: t for name, t in stream.saved().items() if "self_attn" not in name}
    assert len(kept) < len(stream.saved())
    resumed = Code2WavStream.resumed(decoder, 5, codes.shape[:-1], kept)
    with pytest.raises(RuntimeError):
        resumed.push(codes[..., 5:])


@pytest.mark.parametrize("kind", ["code2wav", "12 Hz decoder"])
@pytest.mark.parametrize("primed", [3, 9])
def test_a_static_stream_goes_on_from_an_ordinary_one(kind: str, primed: int) -> None:
    """A decoder primed with a recording's frames (an ordinary stream, as a cloned voice's), then continued over
    the fixed tensors (its state copied in: the attention's fewer keys than the window's, 3 frames here, at the end
    of the fixed ones): the samples of the ordinary stream forked from it, whatever the primed stream does after;
    the primed stream is left as it is."""
    decoder = _decoder(kind)
    assert decoder.static is not None
    codes = torch.randint(0, 64, (1, 16, primed + 18), generator=torch.Generator().manual_seed(4))
    source = decoder.stream()
    source.push(codes[..., :primed])
    static, plain = decoder.static.continued(source), source.fork()
    source.push(codes[..., :2])  # the primed stream moves on apart (the static one goes on from where it was)
    kept = {name: t.clone() for name, t in source.saved().items()}
    worst = _pushed_alike(static, plain, codes, primed, (1, 4, 13))
    print(f"{kind}, {primed} frames primed: static going on against ordinary {worst:.1e}")
    assert worst < REL, worst
    assert all(torch.equal(t, kept[name]) for name, t in source.saved().items())


def test_a_stream_that_cannot_go_on_from_its_state_refuses_every_push() -> None:
    """Going on from a state that lacks a layer's (an ordinary stream resumed from an incomplete one) is refused at
    the first push, and at every push after it: nothing decoded from a half-loaded state."""
    decoder = _decoder("code2wav")
    assert decoder.static is not None
    codes = torch.randint(0, 64, (1, 16, 6), generator=torch.Generator().manual_seed(5))
    source = decoder.stream()
    source.push(codes[..., :4])
    kept = {name: t for name, t in source.saved().items() if "self_attn" not in name}
    static = decoder.static.continued(Code2WavStream.resumed(decoder, 4, codes.shape[:-1], kept))
    for _ in range(2):
        with pytest.raises(ValueError, match="lacks a layer's state"):
            static.push(codes[..., 4:])
    assert static.frames == 4


def test_a_static_stream_goes_on_only_from_its_own_decoders_stream_of_its_shape() -> None:
    decoder, other = _decoder("code2wav"), _decoder("code2wav")
    assert decoder.static is not None
    codes = torch.randint(0, 64, (1, 16, 4), generator=torch.Generator().manual_seed(6))
    source = other.stream()
    source.push(codes[..., :2])
    with pytest.raises(ValueError, match="a stream of another decoder"):
        decoder.static.continued(source)
    mine = decoder.stream()
    mine.push(codes[..., :2])
    static = decoder.static.continued(mine)
    layer = next(layer for layer, t in static._start_state.items() if t.dim() == 4)
    static._start_state[layer] = static._start_state[layer][..., :1]  # a state cut short
    with pytest.raises(ValueError, match="a layer's state of shape"):
        static.push(codes[..., 2:])


@pytest.mark.parametrize("kind", ["code2wav", "12 Hz decoder"])
def test_streams_at_once_each_have_fixed_tensors_of_their_own(kind: str) -> None:
    """A decoder made for two streams at once (a lane loop's): two static streams pushed in turn each give their
    ordinary stream's samples; a stream given back (closed, or gone) frees its lane for the next, and a third
    stream beside two live ones takes the one taken longest ago, whose next push is refused."""
    import gc

    decoder = _decoder(kind)
    decoder.use_static_streams(SHAPE["num_quantizers"], SIZES, capture=False, streams=2)
    assert decoder.static is not None
    codes = torch.randint(0, 64, (2, 1, 16, 20), generator=torch.Generator().manual_seed(3))
    a, b = decoder.fresh_stream(), decoder.fresh_stream()
    plain_a, plain_b = decoder.stream(), decoder.stream()
    worst = 0.0
    for lo, hi in ((0, 1), (1, 5), (5, 18), (18, 20)):  # in turn, each past the attention window
        worst = max(worst, _pushed_alike(a, plain_a, codes[0], lo, (hi - lo,)))
        worst = max(worst, _pushed_alike(b, plain_b, codes[1], lo, (hi - lo,)))
    print(f"{kind}: two streams at once against ordinary ones {worst:.1e}")
    assert worst < REL, worst
    [pool] = decoder.static.lanes.values()
    assert len(pool) == 2 and {lane.owner for lane in pool} == {a, b}
    a.close()
    c = decoder.fresh_stream()
    assert relative_difference(c.push(codes[0][..., :3]), decoder.stream().push(codes[0][..., :3])) < REL
    assert len(pool) == 2 and {lane.owner for lane in pool} == {b, c}  # a's lane, again
    del c
    gc.collect()
    d, plain_d = decoder.fresh_stream(), decoder.stream()
    _pushed_alike(d, plain_d, codes[1], 0, (2,))
    assert len(pool) == 2 and {lane.owner for lane in pool} == {b, d}  # c's, gone with it
    e = decoder.fresh_stream()
    e.push(codes[0][..., :2])  # two live: it takes b's, taken longest ago
    with pytest.raises(RuntimeError, match="replaced by a newer one"):
        b.push(codes[1][..., :1])
    assert _pushed_alike(d, plain_d, codes[1], 2, (4,)) < REL  # the other goes on, untouched
    decoder.static.prepare(1)
    assert len(pool) == 2 and all(lane.ready for lane in pool)
    with pytest.raises(ValueError, match="at least one lane"):
        decoder.use_static_streams(SHAPE["num_quantizers"], SIZES, capture=False, streams=0)
    decoder.use_static_streams(SHAPE["num_quantizers"], SIZES, capture=False, streams=3)
    decoder.static.prepare(1)
    assert [len(p) for p in decoder.static.lanes.values()] == [3] and all(
        lane.ready for lane in decoder.static.lanes[1]
    )
