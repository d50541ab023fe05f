"""Qwen3-Omni's audio encoder at the published shape (random weights): ggtts against transformers in one run.

    python benchmarks/bench_qwen3omni_audio.py [--seconds 5,30] [--threads 2] [--types f16,q8_0] [--repeats 3]

Shape (``Qwen3-Omni-30B-A3B``'s ``audio_config``): 128 mel bins, three stride-2 convolutions of 480 channels, 32
layers of width 1280 (20 heads, feed-forward 5120), attention windows of 800 frames, a projector to the thinker's
2048; 0.65B parameters. transformers builds it (seeded) and runs it in float32 (its SDPA attention) on features
from its ``WhisperFeatureExtractor``; ggtts converts it to mmproj files (``--types``) and runs each on its own
features. Reported per clip length: the features' time (both), the encoder's time and its real-time factor (time /
audio length), best of ``--repeats``, on ``--threads`` threads; and each ggtts file's relative difference from
transformers' output.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ggtts.measure.bench import cpu_model

AUDIO = dict(
    num_mel_bins=128, encoder_layers=32, encoder_attention_heads=20, encoder_ffn_dim=5120, d_model=1280,
    output_dim=2048, n_window=50, n_window_infer=800, downsample_hidden_size=480, max_source_positions=1500,
)  # fmt: skip


def best(fn: Any, repeats: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return min(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", default="5,30", help="clip lengths, comma-separated")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--types", default="f16,q8_0", help="ggtts file types, comma-separated")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    from transformers import WhisperFeatureExtractor
    from transformers.models.qwen3_omni_moe.configuration_qwen3_omni_moe import Qwen3OmniMoeAudioEncoderConfig
    from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import Qwen3OmniMoeAudioEncoder

    from ggtts.convert.qwen3omni_audio import write_audio_encoder
    from ggtts.gguf import GGUFFile
    from ggtts.measure.qwen3omni.parity import question_audio
    from ggtts.models.qwen3omni_audio.features import log_mel
    from ggtts.models.qwen3omni_audio.model import AudioEncoder

    print(f"CPU: {cpu_model()}; {args.threads} threads; torch {torch.__version__}")
    torch.manual_seed(0)
    start = time.perf_counter()
    config = Qwen3OmniMoeAudioEncoderConfig(**AUDIO)
    upstream = Qwen3OmniMoeAudioEncoder(config).eval()
    print(f"built transformers' encoder in {time.perf_counter() - start:.1f} s "
          f"({sum(p.numel() for p in upstream.parameters()) / 1e6:.0f}M parameters)")  # fmt: skip
    extractor = WhisperFeatureExtractor(feature_size=128, sampling_rate=16000, hop_length=160, chunk_length=300,
                                        n_fft=400)  # fmt: skip
    tensors = {f"thinker.audio_tower.{k}": v for k, v in upstream.state_dict().items()}
    thinker_config = {"audio_config": config.to_dict(), "text_config": {"hidden_size": AUDIO["output_dim"]}}
    with tempfile.TemporaryDirectory() as tmp:
        ours: dict[str, AudioEncoder] = {}
        for kind in args.types.split(","):
            path = write_audio_encoder(Path(tmp) / f"mmproj-{kind}.gguf", thinker_config, tensors, kind)
            ours[kind] = AudioEncoder.from_gguf(GGUFFile(path))
            print(f"ggtts {kind}: {path.stat().st_size / 2**20:.0f} MiB")
        print(f"\n{'clip':>6} {'peer':>14} {'features s':>11} {'encoder s':>10} {'RTF':>7} {'rel. diff':>10}")
        for seconds in (float(s) for s in args.seconds.split(",")):
            samples = question_audio(seconds)

            def theirs_features(samples: np.ndarray = samples) -> torch.Tensor:
                out = extractor(samples, sampling_rate=16000, padding=True, truncation=False, return_tensors="pt")
                return out["input_features"][0, :, : samples.size // 160]

            t_feat, features = best(theirs_features, args.repeats)
            frames = features.shape[1]
            with torch.inference_mode():
                t_enc, reference = best(
                    lambda f=features, n=frames: upstream(f, feature_lens=torch.tensor([n])).last_hidden_state,
                    args.repeats,
                )
            print(f"{seconds:>5.0f}s {'transformers':>14} {t_feat:>11.3f} {t_enc:>10.3f} {t_enc / seconds:>7.3f}")
            t_ours_feat, ours_features = best(lambda s=samples: log_mel(s, 128), args.repeats)
            for kind, encoder in ours.items():
                t, out = best(lambda e=encoder, f=ours_features: e(f), args.repeats)
                rel = float((out - reference).norm() / reference.norm())
                print(f"{seconds:>5.0f}s {'ggtts ' + kind:>14} {t_ours_feat:>11.3f} {t:>10.3f} {t / seconds:>7.3f} "
                      f"{rel:>10.2e}")  # fmt: skip


if __name__ == "__main__":
    main()
