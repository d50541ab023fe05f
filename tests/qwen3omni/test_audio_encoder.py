"""Qwen3-Omni's audio encoder: transformers' WhisperFeatureExtractor and Qwen3OmniMoeAudioEncoder vs ours, through
our mmproj converter and a real GGUF file (a small random encoder at Qwen3-Omni's 128 mel bins, two layers, an
attention window of 200 frames so that short clips span several windows), and the file's layout against llama.cpp's
(gguf-py's tensor map for the Omni mmproj, the keys its clip loader reads)."""

from __future__ import annotations

import io
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile
import torch

pytest.importorskip("transformers")

sys.path.insert(0, str(Path(__file__).parents[1]))
from gguf import GGMLQuantizationType, get_tensor_name_map
from gguf.constants import MODEL_ARCH

from ggtts.convert.qwen3omni_audio import sinusoids, write_audio_encoder
from ggtts.errors import ConversionError, GGUFError, InputError
from ggtts.gguf import GGUFFile
from ggtts.gguf.keys import Qwen3OmniAudio as K
from ggtts.gguf.write import ModelWriter
from ggtts.models.qwen3omni_audio.config import AudioConfig
from ggtts.models.qwen3omni_audio.features import check_samples, log_mel, mel_filters, read_audio
from ggtts.models.qwen3omni_audio.model import AudioEncoder

N_MEL = 128
WEIGHT_STD = 0.15
WINDOW = 200  # n_window_infer: 26 encoder positions per attention window
SECONDS = (0.37, 1.0, 2.53, 7.77)  # one short chunk, one whole chunk, a tail, several windows and a tail
# Relative error of the encoder's output against transformers, float32 file: measured 1.3e-7 to 2.9e-7.
F32_TOLERANCE = 1e-5
# f16 file (conv weights and matrices in F16, as llama.cpp's converter writes): measured 4.6e-4 to 5.3e-4;
# q8_0 (matrices in Q8_0 blocks run through ggml, activations rounded to Q8_0 too; conv weights F16): 1.2e-2 to
# 1.3e-2. Attending across the whole clip instead of in windows, or positions counted across chunks: 0.1 and more.
F16_TOLERANCE = 2e-3
Q8_0_TOLERANCE = 3e-2


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm())


def _clip(seconds: float, seed: int = 0) -> np.ndarray:
    n = int(seconds * 16000)
    rng = np.random.default_rng(seed)
    t = np.arange(n) / 16000
    return (0.3 * np.sin(2 * np.pi * 220 * t) * np.sin(2 * np.pi * 1.3 * t) + 0.05 * rng.standard_normal(n)).astype(
        np.float32
    )


def _extractor(n_mel: int = N_MEL) -> Any:
    from transformers import WhisperFeatureExtractor

    # Qwen3-Omni's preprocessor_config.json; the processor calls it with padding=True, truncation=False
    return WhisperFeatureExtractor(feature_size=n_mel, sampling_rate=16000, hop_length=160, chunk_length=300, n_fft=400)


def _reference_features(samples: np.ndarray, n_mel: int = N_MEL) -> torch.Tensor:
    out = _extractor(n_mel)(
        samples, sampling_rate=16000, padding=True, truncation=False, return_attention_mask=True, return_tensors="pt"
    )
    frames = int(out["attention_mask"].sum())
    return out["input_features"][0, :, :frames]


@pytest.fixture(scope="module")
def encoder(tmp_path_factory: pytest.TempPathFactory) -> tuple[torch.nn.Module, dict[str, Any], dict[str, Path]]:
    from transformers.models.qwen3_omni_moe.configuration_qwen3_omni_moe import Qwen3OmniMoeAudioEncoderConfig
    from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import Qwen3OmniMoeAudioEncoder

    cfg = Qwen3OmniMoeAudioEncoderConfig(
        num_mel_bins=N_MEL,
        encoder_layers=2,
        encoder_attention_heads=4,
        encoder_ffn_dim=96,
        d_model=64,
        output_dim=48,
        downsample_hidden_size=8,
        n_window_infer=WINDOW,
    )
    torch.manual_seed(0)
    model = Qwen3OmniMoeAudioEncoder(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layer_norm" in name or "ln_post" in name:
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.1 * torch.randn_like(p))
            else:
                p.normal_(0.0, WEIGHT_STD)
    thinker_config = {"audio_config": cfg.to_dict(), "text_config": {"hidden_size": 48}}
    tensors = {f"thinker.audio_tower.{k}": v for k, v in model.state_dict().items()}  # the published names
    d = tmp_path_factory.mktemp("mmproj")
    files = {t: write_audio_encoder(d / f"mmproj-{t}.gguf", thinker_config, tensors, t) for t in ("f32", "f16", "q8_0")}
    return model, thinker_config, files


@pytest.mark.parametrize("seconds", [0.0137, 0.37, 1.0, 2.53, 7.77, -3.0])
@pytest.mark.parametrize("n_mel", [N_MEL, 16])
def test_features_are_transformers_whisper_features(seconds: float, n_mel: int) -> None:
    samples = _clip(abs(seconds))
    if seconds < 0:  # a pause: its quiet bins sit on the floor 8 below the clip's loudest
        samples[16000:32000] *= 1e-4
    ours = log_mel(samples, n_mel)
    ref = _reference_features(samples, n_mel)
    assert ours.shape == ref.shape == (n_mel, samples.size // 160)
    assert float((ours - ref).abs().max()) <= 1e-5


def test_mel_filters_are_transformers_slaney_filters() -> None:
    from transformers.audio_utils import mel_filter_bank

    ref = mel_filter_bank(
        num_frequency_bins=201, num_mel_filters=N_MEL, min_frequency=0.0, max_frequency=8000.0,
        sampling_rate=16000, norm="slaney", mel_scale="slaney",
    )  # fmt: skip
    assert np.abs(mel_filters(N_MEL) - ref).max() <= 1e-12 * np.abs(ref).max()


@pytest.mark.parametrize("seconds", SECONDS)
def test_encoder_matches_transformers_through_the_gguf(encoder: tuple, seconds: float) -> None:
    model, _, files = encoder
    features = log_mel(_clip(seconds), N_MEL)
    frames = features.shape[1]
    with torch.no_grad():
        ref = model(features, feature_lens=torch.tensor([frames])).last_hidden_state
    for kind, tolerance in (("f32", F32_TOLERANCE), ("f16", F16_TOLERANCE), ("q8_0", Q8_0_TOLERANCE)):
        ours = AudioEncoder.from_gguf(GGUFFile(files[kind]))
        out = ours(features)
        assert out.shape == ref.shape == (ours.cfg.tokens(frames), 48)
        assert _rel(out, ref) <= tolerance, kind


def test_encoder_at_the_published_window_matches_transformers(encoder: tuple, tmp_path: Path) -> None:
    """The default 800-frame window (the key absent, as in llama.cpp's files): 9.3 s is one window and a rest."""
    model, config, _ = encoder
    model.n_window_infer = 800
    try:
        audio = {k: v for k, v in config["audio_config"].items() if k != "n_window_infer"}
        tensors = {f"audio_tower.{k}": v for k, v in model.state_dict().items()}  # a thinker-only checkpoint's names
        path = write_audio_encoder(tmp_path / "m.gguf", {**config, "audio_config": audio}, tensors, "f32")
        features = log_mel(_clip(9.3, seed=1), N_MEL)
        with torch.no_grad():
            ref = model(features, feature_lens=torch.tensor([features.shape[1]])).last_hidden_state
        ours = AudioEncoder.from_gguf(GGUFFile(path))
        assert ours.window(features.shape[1]) == 104
        assert _rel(ours(features), ref) <= F32_TOLERANCE
    finally:
        model.n_window_infer = WINDOW


def test_the_file_has_llama_cpps_names_keys_and_layout(encoder: tuple) -> None:
    model, _, files = encoder
    tensor_map = get_tensor_name_map(MODEL_ARCH.MMPROJ, 128)
    upstream = {f"audio_tower.{k}" for k in model.state_dict()} | {"audio_tower.embed_positions.weight"}
    expected = {tensor_map.get_name(n, try_suffixes=(".weight", ".bias")) for n in upstream}
    for kind, path in files.items():
        gguf = GGUFFile(path)
        assert set(gguf.names()) == expected  # gguf-py's names for the HF names, as llama.cpp's converter maps them
        assert gguf.architecture == "clip"
        assert gguf.get("general.type") == "mmproj"
        assert gguf.get("clip.has_audio_encoder") is True
        assert gguf.get("clip.audio.projector_type") == "qwen3a"
        assert gguf.get("clip.audio.projection_dim") == 48
        assert gguf.get("clip.audio.embedding_length") == 64
        assert gguf.get("clip.audio.feed_forward_length") == 96
        assert gguf.get("clip.audio.block_count") == 2
        assert gguf.get("clip.audio.attention.head_count") == 4
        assert gguf.get("clip.audio.num_mel_bins") == N_MEL
        assert gguf.get("clip.audio.attention.layer_norm_epsilon") == pytest.approx(1e-5)
        for i in (1, 2, 3):
            assert tuple(gguf.info(f"a.conv2d.{i}.bias").shape) == (8, 1, 1)  # ggml {1, 1, C}: llama.cpp's reshape
            conv_type = gguf.info(f"a.conv2d.{i}.weight").type
            assert conv_type == (GGMLQuantizationType.F32 if kind == "f32" else GGMLQuantizationType.F16)
        assert gguf.info("a.conv_out.weight").type == gguf.info("a.conv2d.1.weight").type
        table = gguf.tensor("a.position_embd.weight")
        assert tuple(table.shape) == (1500, 64)
        assert float((table - model.positional_embedding.positional_embedding).abs().max()) <= 1e-6
    assert GGUFFile(files["q8_0"]).info("a.blk.1.ffn_up.weight").type == GGMLQuantizationType.Q8_0


def _as_llama_cpp_omni_file(
    src: Path, dst: Path, *, drop: tuple[str, ...] = (), add: dict[str, Any] | None = None
) -> Path:
    """``src`` as llama.cpp writes an Omni mmproj: no ggtts keys, the vision tower's tensors and keys beside."""
    gguf = GGUFFile(src)
    w = ModelWriter(dst, K.ARCH)
    for key, value in gguf.metadata.items():
        if key not in ("general.architecture", "general.file_type", *drop) and ".qwen3a." not in key:
            w.add(key, value)
    for key, value in {"clip.has_vision_encoder": True, "clip.vision.projector_type": "qwen3vl_merger",
                       **(add or {})}.items():  # fmt: skip
        w.add(key, value)
    for name in gguf.names():
        w.add_tensor(name, gguf.tensor(name))
    w.add_tensor("v.blk.0.attn_q.weight", torch.ones(32, 32))
    w.add_tensor("mm.0.weight", torch.ones(32, 32))
    return w.write()


def test_a_llama_cpp_omni_mmproj_loads_its_audio_half(encoder: tuple, tmp_path: Path) -> None:
    model, _, files = encoder
    path = _as_llama_cpp_omni_file(files["f32"], tmp_path / "omni.gguf")
    gguf = GGUFFile(path)
    assert K.N_WINDOW_INFER not in gguf.metadata
    ours = AudioEncoder.from_gguf(gguf)
    assert (ours.cfg.n_window, ours.cfg.n_window_infer) == (50, 800)  # Qwen3-Omni's, as llama.cpp hard-codes
    features = log_mel(_clip(2.53), N_MEL)
    model.n_window_infer = 800
    try:
        with torch.no_grad():
            ref = model(features, feature_lens=torch.tensor([features.shape[1]])).last_hidden_state
    finally:
        model.n_window_infer = WINDOW
    assert _rel(ours(features), ref) <= F32_TOLERANCE


def test_files_that_are_not_a_qwen3_audio_encoder_are_refused(encoder: tuple, tmp_path: Path) -> None:
    _, _, files = encoder
    other = _as_llama_cpp_omni_file(files["f32"], tmp_path / "q2a.gguf", add={"clip.audio.projector_type": "qwen2a"})
    with pytest.raises(GGUFError, match=re.escape("audio projector 'qwen2a' is not Qwen3-Omni's 'qwen3a'")):
        AudioConfig.from_gguf(GGUFFile(other))
    vision = _as_llama_cpp_omni_file(files["f32"], tmp_path / "v.gguf", drop=("clip.has_audio_encoder",))
    with pytest.raises(GGUFError, match="has no audio encoder"):
        AudioConfig.from_gguf(GGUFFile(vision))


def test_the_converter_refuses_what_it_cannot_write(encoder: tuple, tmp_path: Path) -> None:
    model, config, _ = encoder
    tensors = {f"thinker.audio_tower.{k}": v for k, v in model.state_dict().items()}
    with pytest.raises(ConversionError, match="--type q4_0 is not offered for the audio encoder"):
        write_audio_encoder(tmp_path / "x.gguf", config, tensors, "q4_0")
    with pytest.raises(ConversionError, match="has no audio_config"):
        write_audio_encoder(tmp_path / "x.gguf", {"text_config": {}}, tensors, "f32")
    with pytest.raises(ConversionError, match="output_dim 48 differs from the thinker's hidden size 64"):
        write_audio_encoder(tmp_path / "x.gguf", {**config, "text_config": {"hidden_size": 64}}, tensors, "f32")
    missing = {k: v for k, v in tensors.items() if not k.endswith("layers.1.fc2.bias")}
    with pytest.raises(ConversionError, match=re.escape("no audio tensor 'audio_tower.layers.1.fc2.bias'")):
        write_audio_encoder(tmp_path / "x.gguf", config, missing, "f32")
    assert not (tmp_path / "x.gguf").exists()


def test_sinusoids_are_upstreams_position_table(encoder: tuple) -> None:
    model, _, _ = encoder
    reference = model.positional_embedding.positional_embedding
    assert float((sinusoids(1500, 64) - reference).abs().max()) <= 1e-6  # sin/cos kernels may differ by an ulp


def _wav(samples: np.ndarray, rate: int) -> bytes:
    buf = io.BytesIO()
    soundfile.write(buf, samples, rate, format="WAV", subtype="FLOAT")
    return buf.getvalue()


def test_audio_is_read_as_16_khz_mono() -> None:
    clip = _clip(1.0)
    stereo = np.stack([clip, clip], axis=1)
    assert np.array_equal(read_audio(_wav(stereo, 16000)), clip)
    tone = lambda rate: (0.5 * np.sin(2 * np.pi * 440 * np.arange(rate) / rate)).astype(np.float32)  # noqa: E731
    down = read_audio(_wav(tone(44100), 44100))  # one second at 44.1 kHz
    assert down.size == 16000
    assert float(np.abs(down[800:-800] - tone(16000)[800:-800]).max()) < 1e-3  # the same tone at 16 kHz


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"not audio at all", "not an audio file that can be decoded"),
        (_wav(np.zeros(16000, np.float32), 16000), "is silent"),
        (_wav(np.full(16000, 1e-5, np.float32), 16000), "is silent"),
        (_wav(_clip(0.05), 16000), r"is too short \(0.050 s\)"),
        (_wav(np.zeros((0,), np.float32), 16000), "holds no audio"),
    ],
    ids=["not-audio", "zeros", "one-step", "short", "empty"],  # a WAV's bytes differ per process (a PEAK time)
)
def test_audio_that_cannot_be_heard_gets_one_clear_error(data: bytes, message: str) -> None:
    with pytest.raises(InputError, match=message):
        read_audio(data, "question.wav")


def test_samples_that_are_not_numbers_or_too_long_are_refused() -> None:
    bad = _clip(1.0)
    bad[100] = np.nan
    with pytest.raises(InputError, match="not finite"):
        check_samples(bad)
    with pytest.raises(InputError, match="too long"):
        check_samples(np.ones(16000 * 60 * 41, np.float32))
    with pytest.raises(InputError, match="no such file"):
        read_audio("/no/such/question.wav")
