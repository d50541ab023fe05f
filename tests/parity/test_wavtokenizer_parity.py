"""WavTokenizer decoder: upstream VocosBackbone + ISTFTHead vs ours, through our converter and a real GGUF
file."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ggtts.convert.wavtokenizer_ckpt import CODEBOOK, convert_wavtokenizer_ckpt
from ggtts.gguf import GGUFFile
from ggtts.gguf.keys import WavTokenizerDec as K
from ggtts.models.wavtokenizer.model import WavTokenizerDecoder

N_VOCAB, N_FEATURES, DIM, N_FF, N_LAYERS = 96, 16, 64, 96, 2  # tiny; DIM divisible by the 32 GroupNorm groups
N_FFT, HOP = 1280, 320
N_BANDWIDTHS = 4


def _upstream(seed: int = 0) -> tuple[torch.nn.Module, dict[str, torch.Tensor]]:
    from _wavtokenizer_upstream import load_upstream_decoder

    up = load_upstream_decoder()
    torch.manual_seed(seed)
    backbone = up.models.VocosBackbone(
        input_channels=N_FEATURES,
        dim=DIM,
        intermediate_dim=N_FF,
        num_layers=N_LAYERS,
        adanorm_num_embeddings=N_BANDWIDTHS,
    )
    head = up.heads.ISTFTHead(dim=DIM, n_fft=N_FFT, hop_length=HOP, padding="same")
    codebook = torch.randn(N_VOCAB, N_FEATURES)
    decoder = up.WavDecoder(backbone, head, codebook).eval()
    with torch.no_grad():  # random everything, so that AdaLayerNorm rows and norms differ from their init
        for name, p in decoder.named_parameters():
            p.add_(torch.randn_like(p) * (0.5 if "norm" in name else 0.1))
        head.out.weight.mul_(0.3)  # keep exp(log-magnitude) mostly below the 1e2 clip
    state = {f"{k}": v.clone() for k, v in decoder.state_dict().items() if k != "codebook_weights"}
    state[CODEBOOK] = codebook.clone()
    state[CODEBOOK.replace("embed", "embed_avg")] = codebook.clone()  # upstream extras the converter skips
    state[CODEBOOK.replace("embed", "inited")] = torch.ones(1)
    state["discriminators.0.convs.0.weight"] = torch.randn(4, 1, 3)
    return decoder, state


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> tuple[torch.nn.Module, Path]:
    decoder, state = _upstream()
    d = tmp_path_factory.mktemp("wavtok")
    ckpt = d / "wavtokenizer_tiny.ckpt"
    torch.save({"state_dict": state, "hyper_parameters": {"sample_rate": 24000}}, ckpt)
    out = convert_wavtokenizer_ckpt(ckpt, d / "wavtok-f32.gguf", "f32")
    return decoder, out


def test_gguf_uses_llama_cpp_names_and_shapes(converted: tuple[torch.nn.Module, Path]) -> None:
    g = GGUFFile(converted[1])
    assert g.architecture == "wavtokenizer-dec"
    assert g.require(K.VOCAB_SIZE) == N_VOCAB and g.require(K.EMBEDDING_LENGTH) == N_FFT + 2
    assert g.require(K.POSNET_BLOCK_COUNT) == 6 and g.require(K.CONVNEXT_BLOCK_COUNT) == N_LAYERS
    # llama.cpp's shapes, torch order: per-channel conv vectors are (C, 1)
    assert g.info("token_embd.weight").shape == (N_VOCAB, N_FEATURES)
    assert g.info("conv1d.weight").shape == (DIM, N_FEATURES, 7)
    assert g.info("conv1d.bias").shape == (DIM, 1)
    assert g.info("posnet.0.norm1.weight").shape == (DIM, 1)
    assert g.info("posnet.2.attn_q.weight").shape == (DIM, DIM, 1)
    assert g.info("posnet.5.attn_norm.bias").shape == (DIM, 1)
    assert g.info("convnext.0.dw.weight").shape == (DIM, 1, 7)
    assert g.info("convnext.1.gamma.weight").shape == (DIM,)
    assert g.info("token_embd_norm.weight").shape == (DIM,)
    assert g.info("output.weight").shape == (N_FFT + 2, DIM)
    assert "head.istft.window" not in g.names() and not any("embed_avg" in n for n in g.names())


@pytest.mark.parametrize("n_codes", [1, 5, 37])
def test_audio_matches_upstream(converted: tuple[torch.nn.Module, Path], n_codes: int) -> None:
    upstream, path = converted
    ours = WavTokenizerDecoder.from_gguf(GGUFFile(path))
    codes = torch.randint(0, N_VOCAB, (1, n_codes), generator=torch.Generator().manual_seed(n_codes))
    with torch.no_grad():
        features = upstream.codes_to_features(codes)
        ref = upstream(features, bandwidth_id=torch.tensor([0]))
        got = ours(codes)
    assert got.shape == (1, HOP * n_codes) == ref.shape
    assert ref.abs().max() > 1e-3
    torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-4 * float(ref.abs().max()))


def test_other_bandwidths_are_not_what_we_baked(converted: tuple[torch.nn.Module, Path]) -> None:
    """The test above can fail: bandwidth 1 gives different audio, so baking row 0 matters."""
    upstream, path = converted
    ours = WavTokenizerDecoder.from_gguf(GGUFFile(path))
    codes = torch.arange(20).unsqueeze(0)
    with torch.no_grad():
        other = upstream(upstream.codes_to_features(codes), bandwidth_id=torch.tensor([1]))
        got = ours(codes)
    assert (got - other).abs().max() > 1e-2 * float(other.abs().max())


def test_f16_file_is_close(converted: tuple[torch.nn.Module, Path], tmp_path: Path) -> None:
    _, path = converted
    ckpt = tmp_path / "again.ckpt"
    _, state = _upstream()
    torch.save({"state_dict": state}, ckpt)
    f16 = WavTokenizerDecoder.from_gguf(GGUFFile(convert_wavtokenizer_ckpt(ckpt, tmp_path / "f16.gguf", "f16")))
    f32 = WavTokenizerDecoder.from_gguf(GGUFFile(path))
    codes = torch.arange(12).unsqueeze(0)
    with torch.no_grad():
        a, b = f16(codes), f32(codes)
    assert float((a - b).norm() / b.norm()) < 1e-2


def test_out_of_range_code_is_a_clear_error(converted: tuple[torch.nn.Module, Path]) -> None:
    ours = WavTokenizerDecoder.from_gguf(GGUFFile(converted[1]))
    with pytest.raises(ValueError, match=f"code {N_VOCAB} is out of range"):
        ours(torch.tensor([[1, N_VOCAB]]))
