"""ONNX export -> KModel state dict, checked against onnxruntime, torch and hand-computed values."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from tiny_onnx import C_IN, C_OUT, D_IN, D_LIN, HIDDEN, K, L, T, make_weights, write_tiny_onnx

from ggtts.convert.kokoro_gguf import fold_weight_norm, load_voices
from ggtts.convert.kokoro_onnx import (
    add_instance_norm_defaults,
    dequantize,
    initializer_to_key,
    reorder_lstm_gates,
    scope_to_module,
    state_dict_from_onnx,
)
from ggtts.errors import ConversionError

ort = pytest.importorskip("onnxruntime")


# ---- hand-computed values ----------------------------------------------------------------------------------
def test_dequantize_per_tensor_uint8() -> None:
    q = np.array([[0, 255], [128, 10]], dtype=np.uint8)
    out = dequantize(q, np.array(0.5, np.float32), np.array(128, np.uint8))
    np.testing.assert_array_equal(out, [[-64.0, 63.5], [0.0, -59.0]])


def test_dequantize_per_column_int8() -> None:
    q = np.array([[-128, 127], [2, -3]], dtype=np.int8)  # (K, N), one scale per column N
    out = dequantize(q, np.array([0.1, 2.0], np.float32), np.array([0, 1], np.int8), axis=-1)
    np.testing.assert_allclose(out, [[-12.8, 252.0], [0.2, -8.0]], rtol=1e-6)


def test_dequantize_per_channel_axis0() -> None:
    q = np.full((2, 3, 1), 4, dtype=np.int8)  # (O, I, k), one scale per output channel
    out = dequantize(q, np.array([1.0, 0.25], np.float32), None, axis=0)
    np.testing.assert_array_equal(out[:, :, 0], [[4, 4, 4], [1, 1, 1]])


def test_lstm_gates_onnx_iofc_to_torch_ifgo() -> None:
    onnx_order = torch.tensor([[10.0], [20.0], [30.0], [40.0]])  # blocks i=10, o=20, f=30, c=40
    assert reorder_lstm_gates(onnx_order).flatten().tolist() == [10.0, 30.0, 40.0, 20.0]  # i, f, g(=c), o


@pytest.mark.parametrize(
    ("node", "module"),
    [
        ("/encoder/text_encoder/cnn.0/cnn.0.0/Conv_quant", "text_encoder.cnn.0.0"),
        (
            "/encoder/bert/encoder/albert_layer_groups.0/albert_layers.0/attention/query_10/MatMul_quant",
            "bert.encoder.albert_layer_groups.0.albert_layers.0.attention.query",
        ),
        ("/encoder/predictor/text_encoder/lstms.4/LSTM_quant", "predictor.text_encoder.lstms.4"),
        ("/encoder/F0.1/pool/ConvTranspose", "predictor.F0.1.pool"),
        ("/encoder/N_proj/Conv_quant", "predictor.N_proj"),
        (
            "/decoder/decoder/generator/resblocks.1/convs2.0/Conv_quant",
            "decoder.generator.resblocks.1.convs2.0",
        ),
        ("/decoder/decoder/asr_res/asr_res.0/Conv_quant", "decoder.asr_res.0"),
    ],
)
def test_scope_to_module(node: str, module: str) -> None:
    assert scope_to_module(node) == module


@pytest.mark.parametrize(
    ("init", "key"),
    [
        (
            "decoder.decoder.generator.resblocks.4.adain2.2.fc.weight_quantized",
            "decoder.generator.resblocks.4.adain2.2.fc.weight",
        ),
        ("encoder.predictor.F0.0.conv1.bias", "predictor.F0.0.conv1.bias"),
        ("encoder.bert.embeddings.LayerNorm.weight", "bert.embeddings.LayerNorm.weight"),
    ],
)
def test_initializer_to_key(init: str, key: str) -> None:
    assert initializer_to_key(init) == key


# ---- weight norm -------------------------------------------------------------------------------------------
def test_fold_weight_norm_matches_torch_and_zero_channels_stay_zero() -> None:
    conv = torch.nn.utils.weight_norm(torch.nn.Conv1d(3, 4, 5))
    with torch.no_grad():
        conv.weight_v[2].zero_()  # int8 rounding zeroes whole output channels like this
        conv.weight_g[2] = 0.0
        conv.weight_g[1] = 0.7
        conv(torch.zeros(1, 3, 5))  # recompute conv.weight = g * v / ||v|| (torch's own fold)
    folded = fold_weight_norm({"c.weight_g": conv.weight_g.detach(), "c.weight_v": conv.weight_v.detach()})
    w = folded["c.weight"]
    assert torch.isfinite(w).all()
    assert torch.equal(w[2], torch.zeros_like(w[2]))
    keep = [0, 1, 3]
    torch.testing.assert_close(w[keep], conv.weight.detach()[keep])


def test_unfold_for_upstream_weight_norm_survives_zero_channels() -> None:
    from ggtts.measure.kokoro.peers import unfold_weight_norm

    weight = torch.randn(4, 3, 5)
    weight[1] = 0.0
    conv = torch.nn.utils.weight_norm(torch.nn.ConvTranspose1d(4, 3, 5))  # weight norm over dim 0 = in channels
    v, g = unfold_weight_norm(weight)
    with torch.no_grad():
        conv.weight_g.copy_(g)
        conv.weight_v.copy_(v)
        conv(torch.zeros(1, 4, 5))
    assert torch.isfinite(conv.weight).all()
    torch.testing.assert_close(conv.weight.detach(), weight)


def test_instance_norm_defaults_only_for_adain() -> None:
    state = {
        "decoder.encode.norm1.fc.weight": torch.zeros(2 * 514, 128),
        "decoder.generator.resblocks.0.adain2.1.fc.weight": torch.zeros(2 * 256, 128),
        "predictor.text_encoder.lstms.1.fc.weight": torch.zeros(1024, 128),  # AdaLayerNorm: no affine norm
    }
    added = add_instance_norm_defaults(state)
    assert sorted(added) == sorted(
        [
            "decoder.encode.norm1.norm.weight",
            "decoder.encode.norm1.norm.bias",
            "decoder.generator.resblocks.0.adain2.1.norm.weight",
            "decoder.generator.resblocks.0.adain2.1.norm.bias",
        ]
    )
    assert torch.equal(state["decoder.encode.norm1.norm.weight"], torch.ones(514))
    assert torch.equal(state["decoder.generator.resblocks.0.adain2.1.norm.bias"], torch.zeros(256))


# ---- a tiny export, run by onnxruntime ---------------------------------------------------------------------
def _torch_layers(state: dict[str, torch.Tensor]) -> tuple[torch.nn.Module, torch.nn.Module, torch.nn.Module]:
    linear = torch.nn.Linear(D_IN, D_LIN)
    linear.load_state_dict({k.removeprefix("bert_encoder."): v for k, v in state.items() if k.startswith("bert_")})
    lstm = torch.nn.LSTM(D_LIN, HIDDEN, bidirectional=True)
    lstm.load_state_dict({k.removeprefix("predictor.lstm."): v for k, v in state.items() if k.startswith("predictor")})
    conv = torch.nn.Conv1d(C_IN, C_OUT, K, padding=1)
    conv.load_state_dict({k.removeprefix("text_encoder.cnn.0.0."): v for k, v in state.items() if "cnn" in k})
    return linear, lstm, conv


def _run_both(onnx_path: Path) -> tuple[list[np.ndarray], list[np.ndarray]]:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, T, D_IN)).astype(np.float32)
    c = rng.standard_normal((1, C_IN, L)).astype(np.float32)
    expected = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"]).run(None, {"x": x, "c": c})
    state = state_dict_from_onnx(onnx_path)
    assert len(state) == 2 + 8 + 2  # linear, bidirectional LSTM, conv: nothing more, nothing less
    linear, lstm, conv = _torch_layers(state)
    with torch.no_grad():
        lin = linear(torch.from_numpy(x))
        y, _ = lstm(lin.transpose(0, 1))  # (T, 1, 2H)
        y = y.reshape(T, 1, 2, HIDDEN).transpose(1, 2)  # ONNX layout (T, directions, 1, H)
        out = conv(torch.from_numpy(c))
    return expected, [lin.numpy(), y.numpy(), out.numpy()]


def test_fp32_export_matches_onnxruntime(tmp_path: Path) -> None:
    expected, got = _run_both(write_tiny_onnx(tmp_path / "tiny.onnx", make_weights()))
    for e, g in zip(expected, got, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)


def test_fp16_export_matches_fp16_weights(tmp_path: Path) -> None:
    weights = {k: v.astype(np.float16) for k, v in make_weights().items()}
    path = tmp_path / "tiny16.onnx"
    import onnx

    model = onnx.load(str(write_tiny_onnx(tmp_path / "tiny.onnx", make_weights())))
    for init in model.graph.initializer:
        init.CopyFrom(onnx.numpy_helper.from_array(weights[init.name], init.name))
    onnx.save(model, str(path))
    state = state_dict_from_onnx(path)
    assert state["bert_encoder.weight"].dtype == torch.float32
    np.testing.assert_array_equal(state["bert_encoder.weight"].numpy(), weights["onnx::MatMul_1"].T.astype(np.float32))


@pytest.mark.parametrize("per_channel", [False, True])
def test_int8_export_dequantizes_to_the_float_weights(tmp_path: Path, per_channel: bool) -> None:
    from onnxruntime.quantization import quantize_dynamic

    weights = make_weights()
    fp32 = write_tiny_onnx(tmp_path / "tiny.onnx", weights)
    int8 = tmp_path / "tiny.int8.onnx"
    # reduce_range (7-bit weights): on a CPU without VNNI (AVX2 only) onnxruntime's u8s8 products saturate with
    # 8-bit weights, and its own int8 outputs land 13 % (MatMul) to 98 % (LSTM) from its float model (measured, AMD
    # EPYC with AVX2, per-channel); our dequantization is the same code either way.
    ops = ["MatMul", "LSTM", "Conv"]
    quantize_dynamic(str(fp32), str(int8), per_channel=per_channel, reduce_range=True, op_types_to_quantize=ops)
    reference = state_dict_from_onnx(fp32)
    state = state_dict_from_onnx(int8)
    assert state.keys() == reference.keys()
    for key, want in reference.items():
        bound = float(want.abs().max()) / 100  # int8 rounding error is at most half a step, ~max|w| / 254
        assert (state[key] - want).abs().max() <= bound, key
    expected, got = _run_both(int8)  # onnxruntime also quantizes the activations: compare loosely
    for e, g in zip(expected, got, strict=True):
        assert np.linalg.norm(g - e) <= 0.05 * np.linalg.norm(e)


def test_not_an_onnx_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a protobuf at all")
    with pytest.raises(ConversionError, match=r"bad\.onnx"):
        state_dict_from_onnx(bad)


# ---- voices ------------------------------------------------------------------------------------------------
def test_load_voices_npz_and_pt(tmp_path: Path) -> None:
    a, b = np.random.rand(510, 1, 256).astype(np.float32), np.random.rand(510, 256).astype(np.float32)
    np.savez(tmp_path / "pack.npz", va=a, vb=b)
    torch.save(torch.from_numpy(a), tmp_path / "af_test.pt")
    voices = load_voices([tmp_path / "pack.npz", tmp_path / "af_test.pt"])
    assert list(voices) == ["va", "vb", "af_test"]
    assert voices["vb"].shape == (510, 1, 256)
    torch.testing.assert_close(voices["af_test"], torch.from_numpy(a))


def test_load_voices_rejects_duplicates_and_bad_shapes(tmp_path: Path) -> None:
    torch.save(torch.zeros(510, 1, 256), tmp_path / "v.pt")
    with pytest.raises(ConversionError, match="given twice"):
        load_voices([tmp_path / "v.pt", tmp_path / "v.pt"])
    torch.save(torch.zeros(3, 2, 2, 2), tmp_path / "w.pt")
    with pytest.raises(ConversionError, match="shape"):
        load_voices([tmp_path / "w.pt"])
