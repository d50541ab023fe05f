"""Tiny random Piper voices built with piper-tts's own VITS code (``piper.train.vits``; GPL-3.0, so a test and
measurement reference only, imported when used), exported to ONNX the way piper's ``export_onnx`` does it, with a
``.onnx.json`` beside them."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

N_VOCAB = 48
# the phoneme map of a tiny voice: pad, BOS, EOS, space, then letters
PHONEMES = ["_", "^", "$", " ", *"abcdefghijklmnopqrstuvwxyz", *",.!?"]
# one utterance's ids, long enough that the relative attention's window (4 each way) matters: BOS, pads, EOS
TINY_IDS = [1, 0, 20, 0, 8, 0, 15, 0, 15, 0, 18, 0, 3, 0, 26, 0, 18, 0, 21, 0, 15, 0, 7, 0, 44, 0, 2]


@dataclass(frozen=True)
class TinyVoice:
    """Keyword arguments of piper's ``SynthesizerTrn`` beyond the shared ones."""

    name: str
    resblock: str = "2"
    resblock_kernel_sizes: tuple[int, ...] = (3, 5, 7)
    resblock_dilation_sizes: tuple[tuple[int, ...], ...] = ((1, 2), (2, 6), (3, 12))
    upsample_rates: tuple[int, ...] = (8, 8, 4)
    upsample_initial_channel: int = 32
    upsample_kernel_sizes: tuple[int, ...] = (16, 16, 8)
    hidden_channels: int = 24
    inter_channels: int = 16
    filter_channels: int = 48
    n_heads: int = 2
    n_layers: int = 2
    n_speakers: int = 1
    gin_channels: int = 0
    use_sdp: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    def kwargs(self) -> dict[str, Any]:
        return dict(
            n_vocab=N_VOCAB,
            spec_channels=33,
            segment_size=8,
            inter_channels=self.inter_channels,
            hidden_channels=self.hidden_channels,
            filter_channels=self.filter_channels,
            n_heads=self.n_heads,
            n_layers=self.n_layers,
            kernel_size=3,
            p_dropout=0.0,
            resblock=self.resblock,
            resblock_kernel_sizes=self.resblock_kernel_sizes,
            resblock_dilation_sizes=self.resblock_dilation_sizes,
            upsample_rates=self.upsample_rates,
            upsample_initial_channel=self.upsample_initial_channel,
            upsample_kernel_sizes=self.upsample_kernel_sizes,
            n_speakers=self.n_speakers,
            gin_channels=self.gin_channels,
            use_sdp=self.use_sdp,
        )


VOICES = {
    v.name: v
    for v in (
        # piper's x_low and low presets: resblock 2, rates 8 8 4 (here narrower)
        TinyVoice("x_low", hidden_channels=16, inter_channels=16, filter_channels=32, n_layers=1),
        # medium: the joe voice's layout, narrow
        TinyVoice("medium"),
        # high: resblock 1 with three dilations per kernel, four upsampling stages
        TinyVoice(
            "high",
            resblock="1",
            resblock_kernel_sizes=(3, 7, 11),
            resblock_dilation_sizes=((1, 3, 5), (1, 3, 5), (1, 3, 5)),
            upsample_rates=(8, 8, 2, 2),
            upsample_initial_channel=64,
            upsample_kernel_sizes=(16, 16, 4, 4),
        ),
        TinyVoice("multi", n_speakers=3, gin_channels=8),
        TinyVoice("plain_durations", use_sdp=False),
    )
}


def build_upstream(voice: TinyVoice, seed: int = 0) -> Any:
    """piper's ``SynthesizerTrn`` with every weight random (also those upstream starts at zero, which would
    otherwise hide whole stages), in eval mode."""
    from piper.train.vits.models import SynthesizerTrn

    torch.manual_seed(seed)
    return _randomize(SynthesizerTrn(**voice.kwargs()).eval(), seed)


def _randomize(model: Any, seed: int) -> Any:
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.add_(0.15 * torch.randn(p.shape, generator=generator))
            if name.startswith("dp.flows.0."):  # log-durations of a few frames per id, not 0 or 100
                p.copy_(torch.tensor([[-1.2], [0.3]]) if name.endswith(".m") else 0.1 * torch.ones_like(p))
    return model


def save_checkpoint(voice: TinyVoice, path: Path, seed: int = 0) -> Path:
    """piper's Lightning ``VitsModel`` for ``voice`` (its generator's weights drawn as :func:`build_upstream` draws
    them; its discriminators as built), saved by Lightning's own Trainer the way piper's training saves it."""
    import lightning
    from piper.train.vits.lightning import VitsModel

    hop = math.prod(voice.upsample_rates)
    args = voice.kwargs()  # SynthesizerTrn's arguments; VitsModel names four of them otherwise
    window = 2 * (args.pop("spec_channels") - 1)  # the linear spectrogram's channels, from the STFT's length
    renamed = dict(num_symbols=args.pop("n_vocab"), num_speakers=args.pop("n_speakers"))
    renamed["segment_size"] = args.pop("segment_size") * hop  # in samples, not frames
    torch.manual_seed(seed)
    model = VitsModel(**args, **renamed, filter_length=window, win_length=window, hop_length=hop)
    _randomize(model.model_g, seed)
    trainer = lightning.Trainer(
        logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
        accelerator="cpu",
    )  # fmt: skip
    trainer.strategy.connect(model)
    trainer.save_checkpoint(path)
    return path


def export_onnx(model: Any, path: Path, n_speakers: int = 1) -> Path:
    """piper's ``export_onnx``: the decoder's weight norm removed, ``infer`` behind inputs ``input``,
    ``input_lengths``, ``scales`` (and ``sid``), opset 15, TorchScript exporter (constant folding folds the
    flow's weight-normed convolutions into unnamed tensors, as in the published voices)."""
    model.dec.remove_weight_norm()

    def infer_forward(text: torch.Tensor, lengths: torch.Tensor, scales: torch.Tensor, sid: Any = None) -> Any:
        audio = model.infer(
            text, lengths, noise_scale=scales[0], length_scale=scales[1], noise_scale_w=scales[2], sid=sid
        )[0]
        return audio.unsqueeze(1)

    model.forward = infer_forward  # as piper's exporter does: the module's own names stay the tensors' names
    text = torch.randint(4, N_VOCAB, (1, 12))
    args: tuple[Any, ...] = (text, torch.tensor([12]), torch.tensor([0.667, 1.0, 0.8]))
    names = ["input", "input_lengths", "scales"]
    if n_speakers > 1:
        args += (torch.tensor([1]),)
        names.append("sid")
    try:
        _export(model, args, names, path)
    finally:
        del model.forward  # the class's own again
    return path


def _export(model: Any, args: tuple[Any, ...], names: list[str], path: Path) -> None:
    torch.onnx.export(
        model,
        args,
        str(path),
        input_names=names,
        output_names=["output"],
        opset_version=15,
        dynamic_axes={"input": {0: "batch", 1: "phonemes"}, "input_lengths": {0: "batch"}, "output": {0: "batch"}},
        dynamo=False,
    )


def write_voice(upstream: Any, voice: TinyVoice, folder: Path) -> Path:
    """``upstream`` exported as piper does (``folder/voice.onnx``), its ``voice.onnx.json`` beside it, and the pair
    converted by ggtts's converter to ``folder/voice.gguf`` (float32): that file's path."""
    from ggtts.convert.piper_onnx import convert_piper

    export_onnx(upstream, folder / "voice.onnx", voice.n_speakers)
    write_config(folder / "voice.onnx.json", voice)
    return convert_piper([folder / "voice.onnx"], folder / "voice.gguf", "f32")


def write_config(path: Path, voice: TinyVoice, sample_rate: int = 22050) -> Path:
    config: dict[str, Any] = {
        "audio": {"sample_rate": sample_rate, "quality": voice.name},
        "espeak": {"voice": "en-us"},
        "inference": {"noise_scale": 0.667, "length_scale": 1, "noise_w": 0.8},
        "phoneme_type": "espeak",
        "phoneme_id_map": {p: [i] for i, p in enumerate(PHONEMES)},
        "num_symbols": N_VOCAB,
        "num_speakers": voice.n_speakers,
        "speaker_id_map": {f"speaker_{i}": i for i in range(voice.n_speakers)} if voice.n_speakers > 1 else {},
        "language": {"code": "en_US"},
        "dataset": f"tiny-{voice.name}",
    }
    path.write_text(json.dumps(config, ensure_ascii=False), encoding="utf-8")
    return path
