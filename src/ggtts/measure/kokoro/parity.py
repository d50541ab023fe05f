"""Kokoro's parity check (``ggtts parity kokoro``): ggtts against hexgrad's kokoro, stage by stage.

A tiny upstream model is built with random weights (:mod:`ggtts.measure.kokoro.upstream`), written to a
GGUF file by our converter, loaded by our loader, and both run on the same tokens and style. Each stage gets
the same inputs on both sides, so an error shows where it starts:

    stage   dtype   max abs diff   peak   diff / peak   correlation   std ratio   tolerance   ok

A stage passes when ``max |ours - upstream| / max |upstream|`` is at most its tolerance: the number printed is
the number applied. The stages:

- ``bert``, ``frames`` (per token, before rounding), ``durations``, ``f0``, ``n``, ``asr``: the text and prosody
  stages in float32, as the model runs.
- ``source``: the harmonic-plus-noise excitation from upstream's F0, same seed (float32).
- ``decoder``: the decoder and vocoder on upstream's features, F0 and energy and upstream's source spectrum
  (float32). The source's phase spectrum is an angle, which jumps by 2π where a bin grazes the negative real
  axis: a difference in the last bit of F0 can flip it, and the flip depends on the CPU and the thread count,
  so the spectrum is shared here and the source is checked on its own above.
- ``end_to_end``: token ids to audio, both models in float64 (same weights, same seed). At that precision the
  two differ by rounding alone, far below anything that could flip an angle, so the whole chain is compared
  sample by sample on any CPU.

The table, the comparison and the command are :mod:`ggtts.measure.parity`'s.
"""

from __future__ import annotations

import copy
import tempfile
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from unittest import mock

import torch

from ggtts.errors import GGTTSError
from ggtts.measure.parity import StageResult, compare, print_table

__all__ = ["SEED", "TEXT", "TOLERANCES", "StageResult", "kokoro_parity", "kokoro_stages", "print_table"]

SEED = 1234
TEXT = "hello world, this is a test."
# stage -> (dtype compared in, tolerance on max |ours - upstream| / max |upstream|). Each is 11x to 26x the largest
# value measured (docs/parity.md): the tiny model here, full-size random weights and the real
# weights (AMD EPYC; AVX-512, AVX2 and plain kernels; 1 and 2 threads). A 1 % error in one weight or a 0.01 shift
# of one bias fails its stage (tests/measure/test_parity_mutations.py).
TOLERANCES: dict[str, tuple[str, float]] = {
    "bert": ("float32", 1e-5),
    "frames": ("float32", 5e-6),  # frames per token before rounding
    "durations": ("float32", 0.0),  # integer frame counts: must be equal
    "f0": ("float32", 2e-5),
    "n": ("float32", 1e-4),
    "asr": ("float32", 1e-5),
    "source": ("float32", 4e-6),
    "decoder": ("float32", 5e-5),
    "end_to_end": ("float64", 5e-7),
}


def kokoro_stages(
    reference: Any,
    model: Any,
    input_ids: torch.Tensor,
    ref_s: torch.Tensor,
    seed: int = SEED,
    speed: float = 1.0,
    folded: Mapping[str, torch.Tensor] | None = None,
    tolerances: Mapping[str, tuple[str, float]] = TOLERANCES,
) -> list[StageResult]:
    """Every stage of our ``KokoroModel`` against an upstream model (``Upstream`` parts or a ``KModel``).

    ``folded`` is the weight set both float64 copies run with (default: upstream's own, rounded to float32 as
    the GGUF file stores them; see :func:`~ggtts.measure.kokoro.upstream.as_float64`).
    """
    from ggtts.measure.kokoro.upstream import (
        as_float64,
        default_dtype,
        real_axis_angles,
        upstream_source,
        upstream_stages,
    )

    style = model.config.style_dim
    want = upstream_stages(reference, input_ids, ref_s, style, seed, speed)
    upstream_excitation, har = upstream_source(reference, want["f0"], seed)
    generator = model.decoder.generator
    with torch.inference_mode():
        prosody = model.encode_prosody(input_ids, ref_s, speed)
        frames = model.predictor.frames(prosody.features, speed)
        f0, n = model.predict_f0_n(prosody, ref_s)
        asr = model.encode_text(input_ids, prosody.durations)
        source = generator.m_source(want["f0"], torch.Generator().manual_seed(seed))
        with mock.patch.object(generator, "source_spectrum", lambda f0, gen: har):
            decoded = model.decode(want["asr"], want["f0"], want["n"], ref_s)
        bert = model.bert(input_ids)

    reference64, model64 = as_float64(reference, folded), copy.deepcopy(model).double()
    with real_axis_angles():
        with default_dtype(torch.float64):
            want64 = upstream_stages(reference64, input_ids, ref_s.double(), style, seed, speed)
        with torch.inference_mode():
            audio64, _ = model64(input_ids, ref_s.double(), speed, torch.Generator().manual_seed(seed))

    def check(stage: str, ours: torch.Tensor, theirs: torch.Tensor) -> StageResult:
        return compare(stage, ours, theirs, tolerances)

    return [
        check("bert", bert, want["bert"]),
        check("frames", frames, want["raw_durations"].reshape(-1)),
        check("durations", prosody.durations, want["durations"]),
        check("f0", f0, want["f0"]),
        check("n", n, want["n"]),
        check("asr", asr, want["asr"]),
        check("source", source, upstream_excitation),
        check("decoder", decoded.squeeze(), want["audio"]),
        check("end_to_end", audio64.squeeze(), want64["audio"]),
    ]


def kokoro_parity() -> list[StageResult]:
    """Build, convert, load and run a tiny Kokoro both ways; one result per stage."""
    try:
        from ggtts.measure.kokoro.upstream import build_upstream, random_voices, tiny_config
    except ModuleNotFoundError as e:
        raise GGTTSError(f"parity needs the upstream package '{e.name}' (pip install 'ggtts[reference]')") from None
    from ggtts.convert.kokoro_gguf import write_kokoro_gguf
    from ggtts.gguf import GGUFFile
    from ggtts.models.kokoro.load import load_kokoro

    config = tiny_config()
    try:
        with warnings.catch_warnings():  # upstream's deprecated weight_norm and single-layer LSTM dropout
            warnings.simplefilter("ignore", (UserWarning, FutureWarning))
            parts = build_upstream(config)
    except ModuleNotFoundError as e:
        raise GGTTSError(f"parity needs the upstream package '{e.name}' (pip install 'ggtts[reference]')") from None
    voices = random_voices(config)
    with tempfile.TemporaryDirectory(prefix="ggtts-parity-") as tmp:
        path = write_kokoro_gguf(Path(tmp) / "tiny.gguf", config, parts.folded_state(), voices, "f32", name="tiny")
        _, model, loaded_voices, vocab = load_kokoro(GGUFFile(path))
    ids = torch.tensor([[0, *(vocab[c] for c in TEXT if c in vocab), 0]])
    ref_s = loaded_voices["v_one"][ids.shape[1] - 3]  # (1, 2 * style)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", (UserWarning, FutureWarning))
        return kokoro_stages(parts, model, ids, ref_s)
