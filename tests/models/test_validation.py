"""Corrupt but well-formed model files are refused at load, with one line naming the file and the field.

A tiny random Kokoro written by the real converter is damaged in one place at a time (a NaN voicepack, an inf in a
norm, a sample rate of 2**32 - 1, ...); ``ggtts.load`` must raise GGUFError naming what is wrong, and
``ggtts speak`` must print that one line, exit 1 and write nothing, instead of an internal error mid-synthesis.
The Qwen2 and WavTokenizer configs get the same treatment on metadata-only files.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest
import torch
from tiny_kokoro_config import CONFIG

import ggtts
from ggtts.cli import main
from ggtts.convert.kokoro_gguf import write_kokoro_gguf
from ggtts.errors import GGUFError
from ggtts.gguf import GGUFFile, ModelWriter
from ggtts.gguf.keys import Kokoro as K
from ggtts.gguf.keys import Qwen2 as Q
from ggtts.gguf.keys import WavTokenizerDec as W
from ggtts.models.kokoro.config import KokoroConfig
from ggtts.models.kokoro.model import KokoroModel
from ggtts.models.layers import validate
from ggtts.models.qwen2.config import Qwen2Config
from ggtts.models.wavtokenizer.config import WavTokenizerConfig
from gguf_variant import poison, variant

NORM = "bert.layer.full_layer_layer_norm.weight"  # a small tensor: checked at load


@pytest.fixture(scope="module")
def kokoro(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.manual_seed(0)
    state = KokoroModel(KokoroConfig.from_upstream(CONFIG)).state_dict()
    g = torch.Generator().manual_seed(1)
    voices = {name: torch.randn(30, 1, 16, generator=g) for name in ("aa", "bb")}
    return write_kokoro_gguf(tmp_path_factory.mktemp("valid") / "tiny.gguf", CONFIG, dict(state), voices)


KOKORO_CASES: list[tuple[str, dict[str, Any], dict[str, Any], str]] = [
    (
        "nan_voice",
        {},
        {"voice.bb": poison(math.nan)},
        r"voice 'bb' \(tensor 'voice\.bb'\) holds non-finite values \(inf or NaN\)",
    ),
    ("inf_voice", {}, {"voice.aa": poison(math.inf, 40)}, r"voice 'aa' \(tensor 'voice\.aa'\) holds non-finite"),
    ("inf_norm", {}, {NORM: poison(-math.inf)}, rf"tensor '{NORM}' holds non-finite values \(inf or NaN\)"),
    ("nan_bias", {}, {"dec.gen.conv_post.bias": poison(math.nan, 0)}, r"tensor 'dec\.gen\.conv_post\.bias'"),
    (
        "sample_rate",
        {K.SAMPLE_RATE: 2**32 - 1},
        {},
        r"metadata 'kokoro\.sample_rate' is 4294967295; a sample rate must be between 8000 and 384000 Hz",
    ),
    ("low_sample_rate", {K.SAMPLE_RATE: 100}, {}, r"metadata 'kokoro\.sample_rate' is 100; a sample rate must be"),
    ("heads", {K.PLBERT_HEADS: 100_000}, {}, r"'kokoro\.plbert\.num_attention_heads' is 100000; a head count must"),
    ("layers", {K.N_LAYER: 5000}, {}, r"metadata 'kokoro\.n_layer' is 5000; a layer count must be between 1 and 1024"),
    ("upsample", {K.UPSAMPLE_RATES: [2, 1 << 20]}, {}, r"upsample_rates' holds 1048576; an upsampling rate must"),
    ("eps_nan", {K.PLBERT_LAYER_NORM_EPS: math.nan}, {}, r"layer_norm_eps' is nan; a normalization epsilon must"),
    ("threshold_inf", {K.VOICED_THRESHOLD: math.inf}, {}, r"voiced_threshold' is inf; a voicing threshold must"),
    ("edge_id", {K.BOS_EOS_ID: 500}, {}, r"metadata 'kokoro\.bos_eos_id' is 500; a token id must be between 0 and 13"),
    ("width", {K.HIDDEN_DIM: 1 << 30}, {}, r"metadata 'kokoro\.hidden_dim' is 1073741824; a width, vocabulary or"),
    ("hop", {K.ISTFT_HOP: 16}, {}, r"the iSTFT hop 16 is longer than its window n_fft 8"),
]


@pytest.mark.parametrize(("case", "meta", "tensors", "message"), KOKORO_CASES, ids=[c[0] for c in KOKORO_CASES])
def test_corrupt_kokoro_is_refused_at_load(
    kokoro: Path, tmp_path: Path, case: str, meta: dict[str, Any], tensors: dict[str, Any], message: str
) -> None:
    path = variant(kokoro, tmp_path / f"{case}.gguf", meta, tensors)
    with pytest.raises(GGUFError, match=message) as caught:
        ggtts.load(path)
    assert str(caught.value).startswith(f"{path}: ")


def test_the_undamaged_copy_loads(kokoro: Path, tmp_path: Path) -> None:
    """The control: the same rewrite with nothing changed loads, so each case above fails for its one change."""
    model = ggtts.load(variant(kokoro, tmp_path / "same.gguf"))
    assert model.voices == ["aa", "bb"] and model.sample_rate == 24000


@pytest.mark.parametrize("case", ["nan_voice", "sample_rate"])
def test_cli_prints_one_line_and_writes_nothing(
    kokoro: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    _, meta, tensors, message = next(c for c in KOKORO_CASES if c[0] == case)
    path = variant(kokoro, tmp_path / f"{case}.gguf", meta, tensors)
    out = tmp_path / "out.wav"
    assert main(["speak", "-m", str(path), "hi", "-o", str(out)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert pytest.importorskip("re").search(message, err[0]), err[0]
    assert str(path) in err[0] and "internal error" not in err[0]
    assert not out.exists()
    assert list(tmp_path.iterdir()) == [path]


def test_large_tensors_are_not_scanned() -> None:
    """Only tensors up to FINITE_CHECK_MAX_ELEMENTS are read for inf/NaN: the big matrices would cost load time."""
    big = torch.full((validate.FINITE_CHECK_MAX_ELEMENTS + 1,), math.nan)
    validate.check_finite_if_small("m.gguf", "big.weight", big)
    with pytest.raises(GGUFError, match=r"m\.gguf: tensor 'big\.weight' holds non-finite values"):
        validate.check_finite_if_small("m.gguf", "big.weight", big[: validate.FINITE_CHECK_MAX_ELEMENTS])


# ---- the OuteTTS pair's configs, from metadata-only files -----------------------------------------------------
WAVTOKENIZER = {
    W.VOCAB_SIZE: 96,
    W.FEATURES_LENGTH: 8,
    W.POSNET_EMBEDDING_LENGTH: 16,
    W.POSNET_BLOCK_COUNT: 6,
    W.CONVNEXT_EMBEDDING_LENGTH: 16,
    W.CONVNEXT_BLOCK_COUNT: 2,
    W.FEED_FORWARD_LENGTH: 32,
    W.EMBEDDING_LENGTH: 18,
    W.LAYER_NORM_EPS: 1e-6,
    W.GROUP_NORM_EPS: 1e-6,
    W.GROUP_NORM_GROUPS: 4,
    W.HOP_LENGTH: 4,
    W.SAMPLE_RATE: 24000,
}
QWEN2 = {
    Q.EMBEDDING_LENGTH: 16,
    Q.BLOCK_COUNT: 2,
    Q.HEAD_COUNT: 2,
    Q.HEAD_COUNT_KV: 1,
    Q.FEED_FORWARD_LENGTH: 32,
    Q.CONTEXT_LENGTH: 64,
}


def _metadata_file(path: Path, arch: str, meta: dict[str, Any], changes: dict[str, Any]) -> GGUFFile:
    writer = ModelWriter(path, arch)
    for key, value in {**meta, **changes}.items():
        if isinstance(value, int) and value >= 1 << 32:
            writer.meta.add_uint64(key, value)
        else:
            writer.add(key, value)
    if arch == Q.ARCH:
        writer.add_tensor(Q.TOKEN_EMBD + ".weight", torch.zeros(32, 16))
    writer.write()
    return GGUFFile(path)


CONFIG_CASES: list[tuple[str, Any, dict[str, Any], str]] = [
    ("wt_valid", WavTokenizerConfig, {}, ""),
    ("wt_rate", WavTokenizerConfig, {W.SAMPLE_RATE: 2**32 - 1}, r"'wavtokenizer-dec\.sample_rate' is 4294967295; a"),
    ("wt_hop", WavTokenizerConfig, {W.HOP_LENGTH: 0}, r"'wavtokenizer-dec\.hop_length' is 0; a hop length must"),
    ("wt_groups", WavTokenizerConfig, {W.GROUP_NORM_GROUPS: 0}, r"group_norm_groups' is 0; a group count must"),
    ("wt_eps", WavTokenizerConfig, {W.GROUP_NORM_EPS: math.inf}, r"epsilon' is inf; a normalization epsilon"),
    ("wt_layers", WavTokenizerConfig, {W.CONVNEXT_BLOCK_COUNT: 1 << 40}, r"block_count' is 1099511627776; a layer"),
    ("qwen2_valid", Qwen2Config, {}, ""),
    ("qwen2_heads", Qwen2Config, {Q.HEAD_COUNT: 0}, r"'qwen2\.attention\.head_count' is 0; a head count must"),
    ("qwen2_context", Qwen2Config, {Q.CONTEXT_LENGTH: 1 << 40}, r"context_length' is 1099511627776; a context"),
    ("qwen2_rope", Qwen2Config, {Q.ROPE_FREQ_BASE: math.nan}, r"freq_base' is nan; a RoPE base frequency must"),
    ("qwen2_eps", Qwen2Config, {Q.RMS_EPS: -1.0}, r"layer_norm_rms_epsilon' is -1; a normalization epsilon"),
]


@pytest.mark.parametrize(("case", "config", "changes", "message"), CONFIG_CASES, ids=[c[0] for c in CONFIG_CASES])
def test_outetts_configs_check_their_ranges(
    tmp_path: Path, case: str, config: Any, changes: dict[str, Any], message: str
) -> None:
    arch, meta = (W.ARCH, WAVTOKENIZER) if config is WavTokenizerConfig else (Q.ARCH, QWEN2)
    g = _metadata_file(tmp_path / f"{case}.gguf", arch, meta, changes)
    if not message:
        config.from_gguf(g)
        return
    with pytest.raises(GGUFError, match=message) as caught:
        config.from_gguf(g)
    assert str(caught.value).startswith(f"{g.path}: ")


@pytest.mark.parametrize("weight", ["decoder.decode.0.conv1.weight", "predictor.text_encoder.lstms.0.weight_ih_l0"])
def test_damage_in_a_large_weight_is_named_when_speaking(kokoro: Path, weight: str) -> None:
    """Large weights are not scanned at load; NaN there (NaN audio, or NaN durations that break the model) is
    one GGUFError naming the file and the weight, found when it shows."""
    model = ggtts.load(kokoro)
    with torch.no_grad():
        dict(model.model.named_parameters())[weight].view(-1)[:50] = math.nan
    with pytest.raises(GGUFError, match=rf"{re.escape(str(kokoro))}: weight '{re.escape(weight)}' holds non-finite"):
        model.synthesize("ha ha", phonemes=True)


def test_all_finite_reads_every_float_type_and_layout() -> None:
    """numpy reads float32/float64 CPU tensors in place; other types (float16, bfloat16) go through torch."""
    from ggtts.models.layers.validate import all_finite

    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        clean = torch.arange(24, dtype=dtype).reshape(4, 6)
        assert all_finite(clean) and all_finite(clean.t()) and all_finite(clean[:, ::2]) and all_finite(clean[:0])
        for bad in (math.nan, math.inf, -math.inf):
            damaged = clean.clone()
            damaged[3, 5] = bad
            assert not all_finite(damaged) and not all_finite(damaged.t()) and not all_finite(damaged[:, 1::2])
            assert all_finite(damaged[:, ::2])  # the strided view leaves the bad value out
    weight = torch.nn.Parameter(torch.ones(3))  # requires grad: read through a detached view
    assert all_finite(weight)
    with torch.no_grad():
        weight[1] = math.nan
    assert not all_finite(weight)
