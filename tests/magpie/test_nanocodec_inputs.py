"""The nano codec decoder on its own (no NeMo): what codes it accepts, how long its audio is, causality, and
chunked decoding against decoding everything at once."""

from __future__ import annotations

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
