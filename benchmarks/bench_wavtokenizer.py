"""Real-time factor of the WavTokenizer decoder and its iSTFT, at WavTokenizer-large's shape (random weights).

    python benchmarks/bench_wavtokenizer.py [--seconds 10] [--runs 3] [--threads 2]

The shape is that of ``wavtokenizer-large-75`` as llama.cpp's OuteTTS example uses it: 4096 codes, 512-wide
codebook, 768-wide posnet and 12 ConvNeXt blocks, a 1282-wide head (n_fft 1280), hop 320 at 24 kHz.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from ggtts.models.wavtokenizer.config import WavTokenizerConfig
from ggtts.models.wavtokenizer.model import WavTokenizerDecoder

LARGE_75 = WavTokenizerConfig(
    n_vocab=4096,
    n_features=512,
    posnet_dim=768,
    posnet_layers=6,
    convnext_dim=768,
    convnext_layers=12,
    n_ff=2304,
    n_out=1282,
    layer_norm_eps=1e-6,
    group_norm_eps=1e-6,
    group_norm_groups=32,
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0, help="audio length to decode")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cfg = LARGE_75
    model = WavTokenizerDecoder(cfg).eval()
    n_codes = round(args.seconds * cfg.sample_rate / cfg.hop_length)
    codes = torch.randint(0, cfg.n_vocab, (1, n_codes), generator=torch.Generator().manual_seed(0))
    decoder_s, istft_s = [], []
    with torch.inference_mode():
        model(codes)  # warm-up
        for _ in range(args.runs):
            start = time.perf_counter()
            model.spectral_frames(codes)
            mid = time.perf_counter()
            audio = model(codes)
            end = time.perf_counter()
            decoder_s.append(mid - start)
            istft_s.append((end - mid) - (mid - start))  # the whole pass minus the spectrum part
    seconds = audio.shape[-1] / cfg.sample_rate
    dec, ist = statistics.median(decoder_s), statistics.median(istft_s)
    print(f"{n_codes} codes -> {seconds:.2f} s of audio, {args.threads} threads, median of {args.runs} runs")
    print(f"decoder (codes -> spectrum)  {dec:.3f} s  RTF {dec / seconds:.4f}")
    print(f"iSTFT (spectrum -> samples)  {ist:.3f} s  RTF {ist / seconds:.4f}")
    print(f"together                     {dec + ist:.3f} s  RTF {(dec + ist) / seconds:.4f}")


if __name__ == "__main__":
    main()
