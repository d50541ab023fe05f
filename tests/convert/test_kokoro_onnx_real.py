"""The real Kokoro v1.0 int8 export: all KModel tensors recovered; KModel on them vs onnxruntime."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from ggtts.convert.kokoro_onnx import NOT_IN_EXPORT, package_vocab

pytestmark = pytest.mark.needs_weights

# "The quick brown fox jumps over the lazy dog." as misaki spells it
PHONEMES = "ðə kwˈɪk bɹˈWn fˈɑks ʤˈʌmps ˌOvəɹ ðə lˈAzi dˈɑɡ."
VOICE = "jf_alpha"
# Intermediate tensors of kokoro-onnx's graph (names of this export)
ONNX_DURATIONS = "/encoder/Clip_output_0"  # frames per token, after round + clamp
ONNX_RAW_DURATIONS = "/encoder/Div_output_0"  # before rounding
ONNX_F0, ONNX_N = "/encoder/F0_proj/Conv_output_0", "/encoder/N_proj/Conv_output_0"
ONNX_ASR = "/encoder/MatMul_1_output_0"  # aligned text features fed to the decoder


@pytest.fixture(scope="module")
def state(kokoro_int8_state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return kokoro_int8_state  # state_dict_from_onnx of the real export (conftest)


@pytest.fixture(scope="module")
def kmodel(state: dict[str, torch.Tensor]) -> torch.nn.Module:
    pytest.importorskip("kokoro")
    from kmodel_reference import build_kmodel

    from ggtts.measure.kokoro.upstream import load_folded

    vocab = package_vocab()
    assert vocab is not None
    model = build_kmodel(vocab, disable_complex=True).eval()  # the export uses upstream's CustomSTFT
    missing = load_folded(model, state)
    assert set(missing) - set(NOT_IN_EXPORT) <= {k for k in missing if k.startswith("decoder.generator.stft.")}
    return model


@pytest.mark.needs_reference
def test_every_kmodel_tensor_recovered_with_its_shape(state: dict[str, torch.Tensor]) -> None:
    pytest.importorskip("kokoro")
    from kmodel_reference import build_kmodel

    vocab = package_vocab()
    assert vocab is not None
    expected = {}
    for key, t in build_kmodel(vocab, disable_complex=False).state_dict().items():  # KModel's default
        if key.endswith(".weight_g"):
            continue
        expected[key.removesuffix("_v") if key.endswith(".weight_v") else key] = tuple(t.shape)
    assert sorted(set(expected) - set(state)) == sorted(NOT_IN_EXPORT)  # ALBERT's pooler: unused, not exported
    assert sorted(set(state) - set(expected)) == []
    assert {k: tuple(v.shape) for k, v in state.items()} == {k: s for k, s in expected.items() if k in state}
    assert all(torch.isfinite(v).all() for v in state.values())


def _spectrogram(x: np.ndarray) -> np.ndarray:
    window = torch.hann_window(1024)
    mag = torch.stft(torch.from_numpy(x), 1024, 256, window=window, return_complex=True).abs()
    return np.log(mag.numpy() + 1e-4)


def _rel_err(reference: np.ndarray, other: np.ndarray) -> float:
    reference, other = reference.ravel(), other.ravel()
    return float(np.linalg.norm(other - reference) / np.linalg.norm(reference))


@pytest.mark.slow
@pytest.mark.needs_reference
def test_kmodel_with_recovered_weights_matches_onnxruntime(
    kokoro_int8_onnx: Path, kokoro_voices_npz: Path, kmodel: torch.nn.Module
) -> None:
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from kmodel_reference import no_source_noise, run_kmodel

    vocab = package_vocab()
    assert vocab is not None
    ids = [vocab[c] for c in PHONEMES if c in vocab]
    tokens = np.array([[0, *ids, 0]], np.int64)
    with np.load(kokoro_voices_npz) as npz:
        ref_s = npz[VOICE][len(ids) - 1].reshape(1, 256).astype(np.float32)

    graph = onnx.load(str(kokoro_int8_onnx))
    taps = [ONNX_DURATIONS, ONNX_RAW_DURATIONS, ONNX_F0, ONNX_N, ONNX_ASR]
    for name in taps:
        graph.graph.output.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None))
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(graph.SerializeToString(), options, providers=["CPUExecutionProvider"])
    feeds = {"tokens": tokens, "style": ref_s, "speed": np.array([1.0], np.float32)}
    audio_o, dur_o, raw_o, f0_o, n_o, asr_o = session.run(None, feeds)
    dur_o = dur_o.ravel().astype(np.int64)

    seen: dict[str, torch.Tensor] = {}
    hook = kmodel.decoder.register_forward_hook(lambda m, i, o: seen.update(asr=i[0], f0=i[1], n=i[2]))
    try:
        with no_source_noise():
            _, dur_t, raw_t = run_kmodel(kmodel, torch.from_numpy(tokens), torch.from_numpy(ref_s))
            # same frame counts as onnxruntime, so that the audio lines up sample for sample
            audio_t, _, _ = run_kmodel(
                kmodel, torch.from_numpy(tokens), torch.from_numpy(ref_s), torch.from_numpy(dur_o)
            )
            with torch.no_grad():
                f0, n = torch.from_numpy(f0_o).reshape(1, -1), torch.from_numpy(n_o).reshape(1, -1)
                audio_dec = kmodel.decoder(torch.from_numpy(asr_o), f0, n, torch.from_numpy(ref_s[:, :128]))
    finally:
        hook.remove()

    # Durations. onnxruntime's int8 graph also quantizes every activation (uint8, per tensor) before each
    # integer MatMul / LSTM, so its unrounded durations drift from float activations by a little; only a token
    # that sits on a rounding boundary may land one frame apart.
    raw_t_np = raw_t.numpy()
    assert np.abs(raw_t_np - raw_o.ravel()).max() < 0.25
    differ = np.nonzero(dur_t.numpy() != dur_o)[0]
    assert len(differ) <= 0.05 * len(dur_o)
    assert np.all(np.abs(dur_t.numpy()[differ] - dur_o[differ]) == 1)
    assert np.all(np.abs(raw_t_np[differ] % 1 - 0.5) < 0.15), (raw_t_np[differ], raw_o.ravel()[differ])

    # Prosody and aligned text features (same frame counts): within 3 %
    assert _rel_err(f0_o, seen["f0"].numpy()) < 0.03
    assert _rel_err(n_o, seen["n"].numpy()) < 0.03
    assert _rel_err(asr_o, seen["asr"].numpy()) < 0.03

    # Audio. The harmonic source integrates F0 into a phase, so a 1 % F0 difference decorrelates the waveform
    # within a few periods: compare the decoder on onnxruntime's own inputs sample by sample, and the whole
    # model by its log-magnitude spectrogram.
    a_onnx = audio_o.ravel()
    a_dec = audio_dec.squeeze().numpy()
    assert len(a_dec) == len(a_onnx) == 600 * int(dur_o.sum())  # 600 samples per frame at 24 kHz
    assert np.corrcoef(a_onnx, a_dec)[0, 1] > 0.85
    a_full = audio_t.numpy()
    assert len(a_full) == len(a_onnx)
    spec_onnx, spec_torch = _spectrogram(a_onnx), _spectrogram(a_full)
    assert np.corrcoef(spec_onnx.ravel(), spec_torch.ravel())[0, 1] > 0.93
    rms_ratio = np.sqrt(np.mean(a_full**2) / np.mean(a_onnx**2))
    assert 0.6 < rms_ratio < 1.4
