"""The nano codec decoder on its own (no NeMo): what codes it accepts, how long its audio is, causality, and
chunked decoding against decoding everything at once."""

from __future__ import annotations

import copy

import pytest
import torch
from _nanocodec_tiny import random_codes

from ggtts.errors import InputError
from ggtts.models.nanocodec.config import NanoCodecConfig
from ggtts.models.nanocodec.model import NanoCodec

HOP = 64
STREAM_ATOL = 1e-5  # measured up to 3e-6 (0 for some chunk sizes): convolution kernels pick their blocking by length


@pytest.fixture(scope="module")
def codec() -> NanoCodec:
    """The tiny codec's layout (odd width 3 at the end, as the real 27) with seeded random weights."""
    cfg = NanoCodecConfig(
        sample_rate=22050,
        num_codebooks=4,
        codebook_size=2016,
        hop_length=HOP,
        fsq_levels=(8, 7, 6, 6),
        up_sample_rates=(8, 4, 2),
        base_channels=24,
        in_kernel_size=7,
        out_kernel_size=3,
        resblock_kernel_sizes=(3, 7, 11),
        resblock_dilations=(1, 3, 5),
    )
    model = NanoCodec(cfg).eval()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("alpha"):
                p.copy_(0.3 + 2.2 * torch.rand(p.shape, generator=gen))
            else:  # about unit gain per layer
                fan_in = p[0].numel() if p.dim() > 1 else 10
                p.copy_(torch.randn(p.shape, generator=gen) / fan_in**0.5)
    return model


@pytest.mark.parametrize("frames", [0, 1, 2, 5])
def test_audio_is_hop_samples_per_frame(codec: NanoCodec, frames: int) -> None:
    audio = codec.decode(random_codes(4, frames))
    assert audio.shape == (frames * HOP,) and audio.dtype == torch.float32
    batch = codec.decode(random_codes(4, frames, batch=3))
    assert batch.shape == (3, frames * HOP)
    if frames:
        assert float(audio.abs().max()) <= 1.0 and float(audio.std()) > 1e-3


@pytest.mark.parametrize(
    ("codes", "message"),
    [
        (torch.zeros(3, 5, dtype=torch.long), r"have 3 codebooks \(shape \[3, 5\]\); this codec decodes 4"),
        (torch.zeros(2, 8, 5, dtype=torch.long), "have 8 codebooks"),
        (torch.full((4, 5), 2016), "audio code 2016 at .* is out of range: this codec has codes 0..2015"),
        (torch.full((4, 5), -1), "audio code -1 .* out of range"),
        (torch.zeros(4, 5), "must be integers, not torch.float32"),
        (torch.zeros(20, dtype=torch.long), r"shape \[20\]; expected \(codebooks, frames\)"),
        (torch.zeros(1, 1, 4, 5, dtype=torch.long), "expected"),
    ],
)
def test_bad_codes_are_refused(codec: NanoCodec, codes: torch.Tensor, message: str) -> None:
    with pytest.raises(InputError, match=message):
        codec.decode(codes)
    with pytest.raises(InputError, match=message):
        next(codec.decode_stream(codes, 2))


def test_audio_is_causal_and_the_receptive_field_is_enough(codec: NanoCodec) -> None:
    codes = random_codes(4, 60, seed=1)
    changed = codes.clone()
    changed[:, 10] = (codes[:, 10] + 1) % 2016
    a, b = codec.decode(codes), codec.decode(changed)
    assert torch.equal(a[: 10 * HOP], b[: 10 * HOP])  # nothing before the changed frame moves
    assert not torch.equal(a[10 * HOP : 11 * HOP], b[10 * HOP : 11 * HOP])
    after = (10 + 1 + codec.cfg.receptive_field_frames) * HOP
    assert torch.equal(a[after:], b[after:])  # nor anything a receptive field after it


@pytest.mark.parametrize("chunk", [1, 7, 29, 100])
def test_chunks_equal_one_shot(codec: NanoCodec, chunk: int) -> None:
    codes = random_codes(4, 40, seed=2)
    one_shot = codec.decode(codes)
    chunks = list(codec.decode_stream(codes, chunk))
    assert [c.shape[-1] for c in chunks] == [min(chunk, 40 - s) * HOP for s in range(0, 40, chunk)]
    torch.testing.assert_close(torch.cat(chunks), one_shot, rtol=0, atol=STREAM_ATOL)


def test_stream_pushes_of_any_size_and_batches(codec: NanoCodec) -> None:
    codes = random_codes(4, 40, batch=2, seed=3)
    stream = codec.stream()
    pieces, start = [], 0
    for n in (1, 5, 2, 0, 17, 15):
        pieces.append(stream.push(codes[..., start : start + n]))
        start += n
    torch.testing.assert_close(torch.cat(pieces, dim=-1), codec.decode(codes), rtol=0, atol=STREAM_ATOL)
    with pytest.raises(InputError, match="after codes of shape"):
        stream.push(codes[0, :, :3])


def test_chunks_without_the_state_of_the_ones_before_differ(codec: NanoCodec) -> None:
    """The chunk test can fail: decoded each on its own (fresh state), chunks differ from the one-shot audio."""
    codes = random_codes(4, 30, seed=4)
    chunks = torch.cat([codec.stream().push(codes[:, s : s + 5]) for s in range(0, 30, 5)])
    assert float((chunks - codec.decode(codes)).abs().max()) > 1000 * STREAM_ATOL
    with pytest.raises(InputError, match="chunk_frames must be at least 1"):
        next(codec.decode_stream(codes, 0))


@pytest.fixture
def static(codec: NanoCodec) -> NanoCodec:
    """The codec streaming over fixed tensors (what a GPU replays as graphs), here eagerly: pushes of 12, 4, 1."""
    model = copy.deepcopy(codec)
    model.use_static_streams((12, 4, 1), capture=False)
    return model


@pytest.mark.parametrize("layout", ["channels-first", "channels-last"])
def test_static_streams_give_the_eager_streams_audio(codec: NanoCodec, static: NanoCodec, layout: str) -> None:
    """Pushes of any size through the fixed sizes (13 = 12 + 1, 5 = 4 + 1...), single and batched: the eager
    stream's samples, the one-shot decode's within the streaming tolerance."""
    if layout == "channels-last":
        codec = copy.deepcopy(codec)
        codec.use_channels_last()
        static.use_channels_last()
    assert (
        static.static is not None
        and static.static.pieces(13) == [12, 1]
        and static.static.pieces(11) == [4, 4, 1, 1, 1]
    )
    for batch in (None, 2):
        codes = random_codes(4, 60, batch=batch or 1, seed=5)
        codes = codes if batch else codes[0]
        eager, fixed = codec.stream(), static.stream()
        got, want, start = [], [], 0
        for n in (1, 5, 13, 0, 2, 12, 27):
            piece = codes[..., start : start + n]
            got.append(fixed.push(piece))
            want.append(eager.push(piece))
            assert got[-1].shape == want[-1].shape
            start += n
        torch.testing.assert_close(torch.cat(got, dim=-1), torch.cat(want, dim=-1), rtol=0, atol=STREAM_ATOL)
        torch.testing.assert_close(torch.cat(got, dim=-1), codec.decode(codes), rtol=0, atol=STREAM_ATOL)


def test_a_new_static_stream_starts_from_silence_and_ends_the_old_one(static: NanoCodec) -> None:
    codes = random_codes(4, 20, seed=6)
    first = static.stream()
    a = torch.cat([first.push(codes[:, :1]), first.push(codes[:, 1:])])
    second = static.stream()
    b = torch.cat([second.push(codes[:, :1]), second.push(codes[:, 1:])])
    assert torch.equal(a, b)  # the same pieces from the same zeros: the same samples
    with pytest.raises(RuntimeError, match="replaced by a newer one"):
        first.push(codes[:, :2])
    with pytest.raises(InputError, match="after codes of shape"):
        second.push(codes[None, :, :2].expand(2, -1, -1))
    with pytest.raises(ValueError, match="must include 1"):
        static.use_static_streams((12, 4))


def test_a_copy_of_a_static_codec_streams_over_tensors_of_its_own(static: NanoCodec) -> None:
    codes = random_codes(4, 9, seed=7)
    first = static.stream()
    a = first.push(codes)
    twin = copy.deepcopy(static)  # after the first stream made its fixed tensors (and, on a GPU, graphs)
    assert twin.static is not None and twin.static is not static.static and twin.static.sizes == (12, 4, 1)
    assert torch.equal(twin.stream().push(codes), a)
    first.push(codes[:, :1])  # the original's stream is still its own


def test_a_static_push_traces_whole(static: NanoCodec) -> None:
    """One graph, no break, for each fixed size: what a CUDA graph capture needs (no host read)."""
    import torch._dynamo as dynamo

    static.stream().push(random_codes(4, 1))
    assert static.static is not None
    lane = static.static.lane(1)
    dynamo.reset()
    with torch.inference_mode():
        for graph in lane.graphs.values():
            explained = dynamo.explain(graph.step)()
            assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons
