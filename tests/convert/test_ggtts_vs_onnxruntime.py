"""ggtts's own Kokoro, converted from the real int8 ONNX file, against onnxruntime running that same file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from ggtts.families.kokoro.pipeline import KokoroTTS
from ggtts.gguf import GGUFFile
from ggtts.models.kokoro.model import Prosody

pytestmark = [pytest.mark.needs_weights, pytest.mark.needs_reference, pytest.mark.slow]

PHONEMES = "ðə kwˈɪk bɹˈWn fˈɑks ʤˈʌmps ˌOvəɹ ðə lˈAzi dˈɑɡ."  # "The quick brown fox jumps over the lazy dog."
VOICE = "jf_alpha"
ONNX_DURATIONS = "/encoder/Clip_output_0"  # frames per token in this export, after rounding
SAMPLES_PER_FRAME = 600  # 24 kHz: 2 x (10 x 6 upsampling x hop 5)


def _log_spectrogram(x: np.ndarray) -> np.ndarray:
    mag = torch.stft(torch.from_numpy(x), 1024, 256, window=torch.hann_window(1024), return_complex=True).abs()
    return np.log(mag.numpy() + 1e-4)


def test_ggtts_matches_onnxruntime_on_the_same_file(kokoro_int8_onnx: Path, kokoro_int8_gguf: Path) -> None:
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    tts = KokoroTTS.from_gguf(GGUFFile(kokoro_int8_gguf))  # the same file converted (conftest)
    ids = tts.token_ids(PHONEMES)
    tokens = np.array([[0, *ids, 0]], np.int64)
    ref_s = tts.voicepack(VOICE)[len(PHONEMES) - 1]  # (1, 256), the row the pipeline uses

    graph = onnx.load(str(kokoro_int8_onnx))
    graph.graph.output.append(onnx.helper.make_tensor_value_info(ONNX_DURATIONS, onnx.TensorProto.FLOAT, None))
    session = ort.InferenceSession(graph.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {"tokens": tokens, "style": ref_s.numpy(), "speed": np.array([1.0], np.float32)}
    audio_onnx, dur_onnx = session.run(None, feeds)
    audio_onnx, dur_onnx = audio_onnx.ravel(), torch.from_numpy(dur_onnx.ravel().astype(np.int64))

    model, input_ids = tts.model, torch.from_numpy(tokens)
    with torch.inference_mode():
        prosody = model.encode_prosody(input_ids, ref_s, 1.0)
        # onnxruntime quantizes activations to uint8 before its integer MatMuls and LSTMs, so a token whose
        # duration sits on a rounding boundary (x.5) may land one frame apart; every other one is identical
        differ = torch.nonzero(prosody.durations != dur_onnx).ravel()
        assert len(differ) <= 0.05 * len(dur_onnx), (prosody.durations, dur_onnx)
        assert ((prosody.durations[differ] - dur_onnx[differ]).abs() == 1).all()
        # the rest of the model on onnxruntime's frame counts, so the audio lines up
        forced = Prosody(durations=dur_onnx, features=prosody.features)
        f0, n = model.predict_f0_n(forced, ref_s)
        asr = model.encode_text(input_ids, dur_onnx)
        audio = model.decode(asr, f0, n, ref_s, torch.Generator().manual_seed(0)).squeeze().numpy()

    assert len(audio) == len(audio_onnx) == SAMPLES_PER_FRAME * int(dur_onnx.sum())
    corr = np.corrcoef(_log_spectrogram(audio).ravel(), _log_spectrogram(audio_onnx).ravel())[0, 1]
    rms_ratio = float(np.sqrt(np.mean(audio**2) / np.mean(audio_onnx**2)))
    print(
        f"durations differing: {len(differ)}/{len(dur_onnx)}; log-spectrogram correlation {corr:.3f}; "
        f"RMS ratio {rms_ratio:.2f}"
    )
    assert corr > 0.9
    assert 0.6 < rms_ratio < 1.4
