"""The nano codec converter: magpie-tts.cpp's names and keys, the layout metadata ggtts adds, stored types, and
one clear error (and no output file) for every archive it cannot convert."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from _nanocodec_tiny import TinyCodec
from gguf import GGMLQuantizationType

from ggtts.convert.nanocodec_nemo import convert_nanocodec, convert_nanocodec_nemo, fold_weight_norm
from ggtts.errors import ConversionError, GGUFError
from ggtts.gguf import GGUFFile, ModelWriter
from ggtts.gguf.keys import NanoCodec as K
from ggtts.models.nanocodec.config import CPP_DEFAULTS, NanoCodecConfig
from ggtts.models.nanocodec.model import NanoCodec

# the tiny codec of measure/magpie/upstream.py: 4 groups of FSQ levels [8, 7, 6, 6], rates [8, 4, 2], width 24
GROUPS, LEVELS, RATES, BASE = 4, [8, 7, 6, 6], [8, 4, 2], 24
N_TENSORS = 2 * GROUPS + 2 + 3 * 3 + 3 * 3 * 3 * 6 + 3  # FSQ, pre, per stage (alpha, weight, bias), res, post


def _write_nemo(path: Path, config: dict[str, Any], state: dict[str, torch.Tensor] | None = None) -> Path:
    """A .nemo archive as NeMo lays it out (``./model_config.yaml``, ``./model_weights.ckpt``)."""
    weights = io.BytesIO()
    torch.save(state or {}, weights)
    with tarfile.open(path, "w") as tar:
        for name, data in (
            ("./model_config.yaml", yaml.safe_dump(config).encode()),
            ("./model_weights.ckpt", weights.getvalue()),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _codec_config(**decoder: Any) -> dict[str, Any]:
    modules = "nemo.collections.tts.modules.audio_codec_modules"
    return {
        "target": "nemo.collections.tts.models.audio_codec.AudioCodecModel",
        "sample_rate": 22050,
        "samples_per_frame": 64,
        "vector_quantizer": {
            "_target_": f"{modules}.GroupFiniteScalarQuantizer",
            "num_groups": 4,
            "num_levels_per_group": LEVELS,
        },
        "audio_decoder": {
            "_target_": f"{modules}.CausalHiFiGANDecoder",
            "input_dim": 16,
            "up_sample_rates": RATES,
            "base_channels": BASE,
            "activation": "half_snake",
            **decoder,
        },
    }


def _no_output(out: Path) -> None:
    assert not out.exists()
    assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}")], "a temporary file was left"


# ---- names and keys ----------------------------------------------------------------------------------------------
@pytest.mark.needs_reference
def test_names_and_keys_are_magpie_cpp_s(tiny_codec: TinyCodec) -> None:
    g = GGUFFile(tiny_codec.gguf)
    assert g.architecture == "nano-codec"
    # magpie-tts.cpp's five keys, as uint32
    assert g.require("codec.sample_rate") == 22050
    assert g.require("codec.num_codebooks") == GROUPS
    assert g.require("codec.codebook_size") == 8 * 7 * 6 * 6
    assert g.require("codec.hop_length") == 64
    assert g.require("codec.latent_dim") == GROUPS * len(LEVELS)
    # the layout ggtts adds
    assert g.require("codec.fsq_levels") == LEVELS
    assert g.require("codec.up_sample_rates") == RATES
    assert g.require("codec.base_channels") == BASE
    assert g.require("codec.in_kernel_size") == 7 and g.require("codec.out_kernel_size") == 3
    assert g.require("codec.resblock_kernel_sizes") == [3, 7, 11]
    assert g.require("codec.resblock_dilation_sizes") == [1, 3, 5]
    assert g.require("codec.activation") == "half_snake" and g.require("codec.output_activation") == "tanh"

    shapes = {n: g.info(n).shape for n in g.names()}
    assert len(shapes) == N_TENSORS
    # magpie-tts.cpp's shortened names, NeMo's shapes (torch order), weight norm folded
    assert shapes["dec.pre.weight"] == (BASE, 16, 7) and shapes["dec.pre.bias"] == (BASE,)
    assert shapes["dec.act.0.activation.snake_act.alpha"] == (1, BASE // 2, 1)
    assert shapes["dec.up.0.c.weight"] == (BASE, 1, 16) and shapes["dec.up.0.c.bias"] == (BASE // 2,)
    assert shapes["dec.up.2.c.weight"] == (6, 1, 4)
    assert shapes["dec.rl.0.rb.2.rb.1.in_conv.weight"] == (12, 12, 11)
    assert shapes["dec.rl.1.rb.0.rb.2.sk_conv.bias"] == (6,)
    assert shapes["dec.rl.2.rb.1.rb.0.in_act.alpha"] == (1, 1, 1)  # 3 channels: Snake on 1, leaky ReLU on 2
    assert shapes["dec.rl.2.rb.1.rb.0.sk_act.alpha"] == (1, 1, 1)
    assert shapes["dec.post_act.alpha"] == (1, 1, 1)
    assert shapes["dec.post.weight"] == (1, 3, 3) and shapes["dec.post.bias"] == (1,)
    assert shapes["vq.fsqs.3.num_levels"] == (1, 4, 1)
    assert g.tensor("vq.fsqs.0.num_levels").flatten().tolist() == LEVELS
    assert g.tensor("vq.fsqs.0.dim_base_index").flatten().tolist() == [1, 8, 56, 336]
    assert not any("parametrizations" in n or "encoder" in n or "loss" in n for n in shapes)


def test_tensor_names_shorten_like_magpie_cpp() -> None:
    cases = {
        "audio_decoder.pre_conv.conv.weight": "dec.pre.weight",
        "audio_decoder.post_conv.conv.bias": "dec.post.bias",
        "audio_decoder.post_activation.activation.snake_act.alpha": "dec.post_act.alpha",
        "audio_decoder.activations.4.activation.snake_act.alpha": "dec.act.4.activation.snake_act.alpha",
        "audio_decoder.up_sample_conv_layers.3.conv.weight": "dec.up.3.c.weight",
        "audio_decoder.res_layers.4.res_blocks.2.res_blocks.1.input_activation.activation.snake_act.alpha": (
            "dec.rl.4.rb.2.rb.1.in_act.alpha"
        ),
        "audio_decoder.res_layers.0.res_blocks.1.res_blocks.2.skip_conv.conv.weight": (
            "dec.rl.0.rb.1.rb.2.sk_conv.weight"
        ),
        "vector_quantizer.fsqs.7.dim_base_index": "vq.fsqs.7.dim_base_index",
    }
    assert {up: K.tensor_name(up) for up in cases} == cases


@pytest.mark.needs_reference
@pytest.mark.parametrize("out_type", ["f16", "q8_0"])
def test_stored_types(tiny_codec: TinyCodec, tmp_path: Path, out_type: str) -> None:
    g = GGUFFile(convert_nanocodec_nemo(tiny_codec.nemo, tmp_path / f"c-{out_type}.gguf", out_type))
    types = {n: g.info(n).type for n in g.names()}
    assert types["dec.pre.bias"] == types["dec.act.0.activation.snake_act.alpha"] == GGMLQuantizationType.F32
    assert types["vq.fsqs.0.num_levels"] == GGMLQuantizationType.F32
    if out_type == "f16":  # weights of 1024 elements and more
        assert types["dec.rl.0.rb.2.rb.0.in_conv.weight"] == GGMLQuantizationType.F16
        assert types["dec.rl.2.rb.0.rb.0.in_conv.weight"] == GGMLQuantizationType.F32  # 3 x 3 x 3: too small
    else:  # ggml's 32-value blocks run along the kernel axis, and no kernel here (nor in the real codec) is 32 wide
        assert set(types.values()) == {GGMLQuantizationType.F32}


def test_weight_norm_fold_matches_torch() -> None:
    conv = torch.nn.utils.parametrizations.weight_norm(torch.nn.ConvTranspose1d(6, 3, 4, stride=2, groups=3))
    with torch.no_grad():
        conv.parametrizations.weight.original0.uniform_(0.5, 1.5)
    folded = fold_weight_norm({f"c.{k}": v for k, v in conv.state_dict().items()})
    assert set(folded) == {"c.weight", "c.bias"}
    torch.testing.assert_close(folded["c.weight"], conv.weight, rtol=0, atol=0)
    with pytest.warns(FutureWarning):  # the older weight_g / weight_v names
        old = torch.nn.utils.weight_norm(torch.nn.Conv1d(3, 5, 3))
    folded = fold_weight_norm({f"c.{k}": v for k, v in old.state_dict().items()})
    assert set(folded) == {"c.weight", "c.bias"}
    torch.testing.assert_close(folded["c.weight"], old.weight, rtol=0, atol=0)


# ---- metadata read back ------------------------------------------------------------------------------------------
def _metadata_only(path: Path, meta: dict[str, Any]) -> GGUFFile:
    w = ModelWriter(path, K.ARCH, "f32")
    for key, value in meta.items():
        w.add(key, value)
    return GGUFFile(w.write())


def test_a_magpie_cpp_file_reads_as_the_real_nano_codec(tmp_path: Path) -> None:
    cpp_keys = (K.SAMPLE_RATE, K.NUM_CODEBOOKS, K.CODEBOOK_SIZE, K.HOP_LENGTH, K.LATENT_DIM)
    cfg = NanoCodecConfig.from_gguf(_metadata_only(tmp_path / "cpp.gguf", {k: CPP_DEFAULTS[k] for k in cpp_keys}))
    assert (cfg.num_codebooks, cfg.codebook_size, cfg.hop_length, cfg.sample_rate) == (8, 2016, 1024, 22050)
    assert cfg.up_sample_rates == (8, 8, 4, 2, 2) and cfg.base_channels == 864 and cfg.channels(5) == 27
    assert cfg.activation == "half_snake" and cfg.output_activation == "tanh"
    with torch.device("meta"):  # the real decoder's shapes, as magpie-tts.cpp's docs list them
        state = NanoCodec(cfg).state_dict()
    assert state["audio_decoder.pre_conv.conv.weight"].shape == (864, 32, 7)
    assert state["audio_decoder.up_sample_conv_layers.4.conv.weight"].shape == (54, 1, 4)
    assert state["audio_decoder.post_activation.activation.snake_act.alpha"].shape == (1, 13, 1)
    assert len(state) == 306


@pytest.mark.parametrize(
    ("meta", "message"),
    [
        ({K.CODEBOOK_SIZE: 2000}, "not the product of the FSQ levels"),
        ({K.HOP_LENGTH: 1000}, "not the product of the upsampling rates"),
        ({K.LATENT_DIM: 33}, "codebooks of 4 FSQ dimensions make 32"),
        ({K.ACTIVATION: "gelu"}, "activation 'gelu' is not one of"),
        ({K.FSQ_LEVELS: [8, 1]}, "FSQ level count"),
        ({K.BASE_CHANNELS: 100}, "cannot be halved"),
    ],
)
def test_inconsistent_metadata_is_refused(tmp_path: Path, meta: dict[str, Any], message: str) -> None:
    g = _metadata_only(tmp_path / "bad.gguf", meta)
    with pytest.raises(GGUFError, match=message) as e:
        NanoCodecConfig.from_gguf(g)
    assert str(g.path) in str(e.value)


# ---- archives that cannot be converted ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"target": "nemo.collections.tts.models.magpietts.MagpieTTSModel"},
            "holds a MagpieTTSModel, not a NeMo audio codec",
        ),
        ({"sample_rate": 22050}, "has no audio_decoder"),
        ({**_codec_config(), "vector_quantizer": None}, "has no vector_quantizer"),
        (
            {**_codec_config(), "vector_quantizer": {"_target_": "x.ResidualVectorQuantizer", "num_codebooks": 8}},
            "quantizer is ResidualVectorQuantizer; only GroupFiniteScalarQuantizer",
        ),
        ({**_codec_config(), "audio_decoder": {"_target_": "x.HiFiGANDecoder"}}, "decoder is HiFiGANDecoder"),
        (_codec_config(activation="gelu"), "activation 'gelu' is not one of"),
        (_codec_config(output_activation="sigmoid"), "output activation 'sigmoid'"),
        (_codec_config(n_groups_equal_to_out_channels=False), "not grouped per output channel"),
        (_codec_config(up_sample_rates=[8, 4]), "samples_per_frame is 64, but the decoder's upsampling rates"),
        (_codec_config(), "has no 'audio_decoder.pre_conv.conv.weight'"),  # a config without its weights
    ],
)
def test_unsupported_nemo_is_refused(tmp_path: Path, config: dict[str, Any], message: str) -> None:
    nemo = _write_nemo(tmp_path / "model.nemo", config)
    out = tmp_path / "out.gguf"
    with pytest.raises(ConversionError, match=message) as e:
        convert_nanocodec([nemo], out, "f32")
    assert len(str(e.value).splitlines()) == 1 and str(nemo) in str(e.value)
    _no_output(out)


def test_missing_settings_are_named(tmp_path: Path) -> None:
    config = _codec_config()
    del config["vector_quantizer"]["num_groups"]
    with pytest.raises(ConversionError, match=r"model_config\.yaml has no setting 'num_groups'"):
        convert_nanocodec([_write_nemo(tmp_path / "m.nemo", config)], tmp_path / "o.gguf", "f32")


@pytest.mark.needs_reference
def test_weights_that_do_not_fit_the_config_are_named(tiny_codec: TinyCodec, tmp_path: Path) -> None:
    with tarfile.open(tiny_codec.nemo) as tar:
        config = yaml.safe_load(tar.extractfile("./model_config.yaml").read())  # type: ignore[union-attr]
        weights = torch.load(tar.extractfile("./model_weights.ckpt"), weights_only=True)  # type: ignore[arg-type]
    config["audio_decoder"]["base_channels"] = 2 * BASE
    out = tmp_path / "o.gguf"
    with pytest.raises(ConversionError, match=r"'audio_decoder\.pre_conv\.conv\.weight' has shape \[24, 16, 7\]"):
        convert_nanocodec([_write_nemo(tmp_path / "m.nemo", config, weights)], out, "f32")
    _no_output(out)


def test_interpolated_config_values_are_resolved(tmp_path: Path) -> None:
    config = {**_codec_config(), "rates": RATES}
    config["audio_decoder"]["up_sample_rates"] = "${rates}"
    nemo = _write_nemo(tmp_path / "model.nemo", config)
    with pytest.raises(ConversionError, match=r"has no 'audio_decoder\.pre_conv\.conv\.weight'"):  # got past the layout
        convert_nanocodec([nemo], tmp_path / "out.gguf", "f32")


@pytest.mark.parametrize("what", ["not a tar", "empty", "no weights"])
def test_not_a_nemo_archive(tmp_path: Path, what: str) -> None:
    nemo = tmp_path / "model.nemo"
    if what == "not a tar":
        nemo.write_bytes(b"PK\x03\x04 a zip, perhaps, but not a .nemo")
    elif what == "empty":
        nemo.write_bytes(b"")
    else:
        with tarfile.open(nemo, "w") as tar:
            info = tarfile.TarInfo("./model_config.yaml")
            tar.addfile(info, io.BytesIO(b""))
    out = tmp_path / "out.gguf"
    with pytest.raises(
        ConversionError,
        match=r"not a \.nemo archive \(a tar file\)$|has no model_weights\.ckpt|is not a mapping of settings",
    ) as e:
        convert_nanocodec([nemo], out, "f32")
    assert len(str(e.value).splitlines()) == 1
    _no_output(out)


def _member_end(nemo: Path, name: str) -> int:
    """The offset just past the data of the archive member ``name``."""
    with tarfile.open(nemo) as tar:
        member = tar.getmember(name)
        return member.offset_data + member.size


@pytest.mark.needs_reference
@pytest.mark.parametrize(
    "cut",
    ["in the first member", "in the weights", "the weights' last bytes"],
)
def test_truncated_nemo_is_refused(tiny_codec: TinyCodec, tmp_path: Path, cut: str) -> None:
    data = tiny_codec.nemo.read_bytes()
    weights_end = _member_end(tiny_codec.nemo, "./model_weights.ckpt")
    keep = {"in the first member": 600, "in the weights": weights_end // 2, "the weights' last bytes": weights_end - 10}
    nemo = tmp_path / "cut.nemo"
    nemo.write_bytes(data[: keep[cut]])
    out = tmp_path / "out.gguf"
    with pytest.raises(ConversionError, match="truncated") as e:
        convert_nanocodec([nemo], out, "f32")
    assert len(str(e.value).splitlines()) == 1
    _no_output(out)


def test_sources_and_types(tmp_path: Path) -> None:
    with pytest.raises(ConversionError, match="exactly one NeMo codec file"):
        convert_nanocodec([tmp_path / "a.nemo", tmp_path / "b.nemo"], tmp_path / "o.gguf", "f32")
    with pytest.raises(ConversionError, match="--type q4_0 is not offered for the nano codec"):
        convert_nanocodec([tmp_path / "a.nemo"], tmp_path / "o.gguf", "q4_0")
    with pytest.raises(ConversionError, match="no such file"):
        convert_nanocodec([tmp_path / "missing.nemo"], tmp_path / "o.gguf", "f32")
