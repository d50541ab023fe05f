"""Our code2wav against transformers' ``Qwen3OmniMoeCode2Wav`` on a tiny random model, through our converter and a
real GGUF file: every stage, the audio and its length, chunked decoding, streaming, a q8_0 file, and the errors.

Measured (CPU, float32): every stage and the audio equal transformers' to the bit (the same torch ops in the same
order); the tolerance leaves room for other kernels, not for a different computation. Streaming differs from
one-shot decoding by ~3e-6 (the transformer's matrix products over other shapes round differently).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch

from ggtts.convert.qwen3omni_code2wav import add_code2wav, code2wav_config, metadata, write_code2wav
from ggtts.errors import ConversionError, GGUFError, InputError
from ggtts.gguf import GGUFFile
from ggtts.gguf.keys import Qwen3OmniCode2Wav as K
from ggtts.gguf.write import ModelWriter
from ggtts.measure.qwen3omni.upstream_code2wav import TINY_CONFIG, build_upstream, checkpoint_tensors, random_codes
from ggtts.models.qwen3omni_code2wav import Code2Wav
from ggtts.models.qwen3omni_code2wav import layers as c2w_layers
from ggtts.models.qwen3omni_code2wav.parity import code2wav_parity_rows, stage_outputs

pytestmark = pytest.mark.needs_reference

ATOL = 1e-5  # the audio (in [-1, 1]); measured 1e-7 (0 with one-dimensional convolutions on both sides)
REL = 1e-5  # of a stage's peak: float32 rounding apart (the decoder's channels-last convolutions sum in another order)
STREAM_ATOL = 2e-5  # measured 3.2e-6
Q8_REL = 0.15  # relative RMS error of q8_0 audio against the f32 file; measured 0.078 (stored), 0.062 (widened)


@pytest.fixture(scope="module")
def upstream() -> Any:
    pytest.importorskip("transformers", reason="needs transformers (Qwen3OmniMoeCode2Wav) as the reference")
    return build_upstream(seed=0)


@pytest.fixture(scope="module")
def files(upstream: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("code2wav")
    tensors = checkpoint_tensors(upstream)
    return {t: write_code2wav(d / f"c2w-{t}.gguf", TINY_CONFIG, tensors, t) for t in ("f32", "q8_0")}


@pytest.fixture(scope="module")
def ours(files: dict[str, Path]) -> Code2Wav:
    return Code2Wav.from_gguf(GGUFFile(files["f32"]))


@pytest.mark.parametrize("frames", [1, 13, 40])
def test_every_stage_matches_transformers(ours: Code2Wav, upstream: Any, frames: int) -> None:
    codes = random_codes(frames, batch=2, seed=frames)
    rows = code2wav_parity_rows(ours, upstream, codes)
    assert [name for name, _ in rows][:3] == ["pre_transformer", "upsample.0.1", "upsample.1.1"]
    assert rows[-1][0] == "audio" and len(rows) == 10
    _, theirs = stage_outputs(ours, upstream, codes)
    for name, diff in rows:
        peak = float(theirs[name].abs().max())
        assert diff <= REL * peak, f"{name}: max |ours - transformers| = {diff:g}, {diff / peak:g} of the peak {peak:g}"
    audio = ours(codes)
    assert audio.shape == (2, 1, frames * 1920 - 555) == (2, 1, ours.cfg.output_length(frames))
    assert float(audio.std()) > 0.05 and float((audio.abs() == 1).float().mean()) < 0.01  # audio, rarely clamped


@pytest.mark.parametrize(("chunk", "context"), [(12, 5), (7, 25), (300, 25)])
def test_chunked_decode_matches_transformers(ours: Code2Wav, upstream: Any, chunk: int, context: int) -> None:
    codes = random_codes(40, batch=2, seed=2)
    with torch.no_grad():
        want = upstream.chunked_decode(codes, chunk_size=chunk, left_context_size=context)
    got = ours.chunked_decode(codes, chunk_size=chunk, left_context_size=context)
    chunks = -(-40 // chunk)
    assert got.shape == want.shape == (2, 1, 40 * 1920 - chunks * 555)  # each chunk drops its last 555 samples
    torch.testing.assert_close(got, want, rtol=0, atol=ATOL)


@pytest.mark.parametrize("pushes", [[40], [1, 39], [10, 10, 10, 10], [1, 2, 3, 7, 10, 17]])
def test_stream_equals_one_shot(ours: Code2Wav, pushes: list[int]) -> None:
    codes = random_codes(40, batch=2, seed=3)
    stream, pieces, start = ours.stream(), [], 0
    for n in pushes:
        pieces.append(stream.push(codes[..., start : start + n]))
        start += n
    assert [p.shape[-1] for p in pieces] == [n * 1920 - (555 if i == 0 else 0) for i, n in enumerate(pushes)]
    torch.testing.assert_close(torch.cat(pieces, dim=-1), ours(codes), rtol=0, atol=STREAM_ATOL)


def test_stream_equals_chunked_decode_within_one_chunk(ours: Code2Wav) -> None:
    """Within one chunk upstream's chunked decoding is one-shot decoding, and so is the stream; across chunks it
    is not (555 samples dropped per boundary, a truncated past), which the stream does not reproduce."""
    codes = random_codes(30, seed=4)
    stream = ours.stream()
    streamed = torch.cat([stream.push(codes[..., i : i + 6]) for i in range(0, 30, 6)], dim=-1)
    torch.testing.assert_close(streamed, ours.chunked_decode(codes, chunk_size=30), rtol=0, atol=STREAM_ATOL)
    chunked = ours.chunked_decode(codes, chunk_size=10, left_context_size=5)
    assert chunked.shape[-1] == streamed.shape[-1] - 2 * 555
    first = 10 * 1920 - 555  # the first chunk is one-shot decoding of its frames
    torch.testing.assert_close(chunked[..., :first], streamed[..., :first], rtol=0, atol=STREAM_ATOL)


def test_q8_0_file_runs_and_stays_close(ours: Code2Wav, files: dict[str, Path]) -> None:
    """q8_0 stores the linears and the code embedding; they run as stored (ggml) where the kernels are installed.
    The tiny random model amplifies weight rounding (0.5% in the embedding, 6% in the audio with the weights
    widened): the stored path must be about as close as the widened one, and the audio still the same audio."""
    from ggtts.ops.stored_weights import StoredLinear, stored_weights_plan

    gguf = GGUFFile(files["q8_0"])
    assert gguf.info(K.tensor_name("pre_transformer.layers.0.mlp.gate_proj.weight")).type.name == "Q8_0"
    stored, widened = Code2Wav.from_gguf(gguf), Code2Wav.from_gguf(gguf, stored_weights=False)
    if stored_weights_plan("cpu").stored:
        assert isinstance(stored.pre_transformer.layers[0].mlp.gate_proj, StoredLinear)
    codes = random_codes(20, seed=5)
    want = ours(codes)

    def rel(audio: torch.Tensor) -> float:
        return float((audio - want).norm() / want.norm())

    r_stored, r_widened = rel(stored(codes)), rel(widened(codes))
    assert 0 < r_widened <= Q8_REL and r_stored <= Q8_REL and r_stored <= 1.5 * r_widened + 0.01


def test_the_exp_of_snake_parameters_matters(ours: Code2Wav, upstream: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Negative control: SnakeBeta without exp() (the llama.cpp port's first bug) is far outside the tolerance."""
    codes = random_codes(13, seed=6)
    with torch.no_grad():
        want = upstream(codes)

    def no_exp(self: c2w_layers.SnakeBeta, x: torch.Tensor, state: Any = None) -> torch.Tensor:
        inv = c2w_layers._per_channel((self.beta + c2w_layers.SNAKE_EPS).reciprocal(), x)
        return x + inv * torch.sin(x * c2w_layers._per_channel(self.alpha, x)) ** 2

    monkeypatch.setattr(c2w_layers.SnakeBeta, "forward", no_exp)
    assert float((ours(codes) - want).abs().max()) > 1000 * ATOL


@pytest.mark.parametrize(
    ("codes", "message"),
    [
        (torch.zeros(1, 15, 4, dtype=torch.long), "have 15 codebooks"),
        (torch.full((1, 16, 4), 32), "audio code 32 at \\[0, 0, 0\\] is out of range"),
        (torch.full((1, 16, 4), -1), "audio code -1"),
        (torch.zeros(1, 16, 4), "must be integers"),
        (torch.zeros(16, 4, dtype=torch.long), "expected \\(batch, codebooks, frames\\)"),
    ],
)
def test_bad_codes_are_refused(ours: Code2Wav, codes: torch.Tensor, message: str) -> None:
    with pytest.raises(InputError, match=message):
        ours(codes)
    with pytest.raises(InputError, match=message):
        ours.stream().push(codes)


def _write_raw(path: Path, arch: str, tensors: dict[str, torch.Tensor], drop: str | None = None) -> GGUFFile:
    writer = ModelWriter(path, arch)
    for key, value in metadata(code2wav_config(TINY_CONFIG)).items():
        writer.add(key.replace(K.ARCH, arch, 1), value)
    for name, tensor in tensors.items():
        if name != drop:
            writer.add_tensor(K.tensor_name(name), tensor)
    return GGUFFile(writer.write())


def test_missing_tensor_and_wrong_architecture_are_gguf_errors(upstream: Any, tmp_path: Path) -> None:
    tensors = checkpoint_tensors(upstream)
    dropped = "code2wav.decoder.2.block.3.act2.beta"
    with pytest.raises(GGUFError, match=re.escape("missing tensor 'c2w.decoder.2.block.3.act2.beta'")):
        Code2Wav.from_gguf(_write_raw(tmp_path / "missing.gguf", K.ARCH, tensors, drop=dropped))
    with pytest.raises(GGUFError, match="architecture is 'nano-codec', expected 'qwen3omni-talker'"):
        Code2Wav.from_gguf(_write_raw(tmp_path / "arch.gguf", "nano-codec", tensors))


def test_loads_beside_a_talker_and_refuses_a_talker_without_code2wav(upstream: Any, tmp_path: Path) -> None:
    writer = ModelWriter(tmp_path / "talker.gguf", K.ARCH)
    writer.add_tensor("blk.0.attn_q.weight", torch.ones(64, 64))  # one of the talker's, to be left alone
    add_code2wav(writer, TINY_CONFIG, checkpoint_tensors(upstream), "f32")
    model = Code2Wav.from_gguf(GGUFFile(writer.write()))
    codes = random_codes(3, seed=7)
    with torch.no_grad():
        torch.testing.assert_close(model(codes), upstream(codes), rtol=0, atol=ATOL)
    bare = ModelWriter(tmp_path / "bare.gguf", K.ARCH)
    bare.add_tensor("blk.0.attn_q.weight", torch.ones(64, 64))
    with pytest.raises(GGUFError, match="holds no code2wav"):
        Code2Wav.from_gguf(GGUFFile(bare.write()))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"hidden_act": "gelu"}, "hidden_act 'gelu' is not supported"),
        ({"attention_bias": True}, "attention_bias true is not supported"),
        ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4}}, "rope_type 'yarn' is not supported"),
        ({"num_key_value_heads": 3}, "4 attention heads cannot share 3 key/value heads"),
    ],
)
def test_converter_refuses_unsupported_settings(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    with pytest.raises(ConversionError, match=message):
        write_code2wav(tmp_path / "x.gguf", {**TINY_CONFIG, **change}, {}, "f32")


def test_converter_names_a_missing_checkpoint_tensor(upstream: Any, tmp_path: Path) -> None:
    tensors = checkpoint_tensors(upstream)
    del tensors["code2wav.upsample.1.1.gamma"]
    with pytest.raises(ConversionError, match=re.escape("no 'code2wav.upsample.1.1.gamma'")):
        write_code2wav(tmp_path / "x.gguf", TINY_CONFIG, tensors, "f32")
