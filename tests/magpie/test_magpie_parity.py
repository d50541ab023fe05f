"""Magpie TTS against NeMo's MagpieTTSModel: a tiny random model saved by NeMo, converted by our converter to a
real GGUF file, loaded by our loader (:mod:`ggtts.measure.magpie.parity`, which ``ggtts parity magpie`` runs):
every layer of both stacks, the heads and the local transformer on the same inputs, and whole greedy generations
against NeMo's ``infer_batch`` code for code."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

pytestmark = pytest.mark.needs_reference


@dataclass
class Pair:
    nemo: Any
    nemo_codec: Any
    ours: Any
    our_codec: Any
    work: Path


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Pair:
    pytest.importorskip("nemo.collections.tts", reason="needs NeMo (nemo_toolkit) to build the reference model")
    from ggtts.measure.magpie.parity import build_pair

    work = tmp_path_factory.mktemp("magpie")
    return Pair(*build_pair(work), work)


def test_converter_keeps_nemo_names_and_the_checkpoint_settings(pair: Pair) -> None:
    from ggtts.gguf import GGUFFile
    from ggtts.gguf.keys import Magpie as K

    g = GGUFFile(pair.work / "tiny-magpie.gguf")
    state = {n for n in pair.nemo.state_dict() if not n.startswith("_codec_model.")}
    skipped = {n for n in state if n.endswith(("causal_mask", "_baked_embedding_T", "_baked_embedding_D"))}
    assert set(g.names()) == state - skipped - {"baked_context_embedding_len"}
    assert g.get_list(K.SPEAKER_NAMES) == ["Jason", "Aria", "Leo"]
    assert g.get_list(K.CONTEXT_LENGTHS) == [7, 5, 6]
    assert g.get_int(K.FRAME_STACKING) == 2 and g.get_int(K.LT_DIM) == 16
    assert g.get_list(K.PRIOR_LAYERS) == [0, 1] and g.get_list(K.ALIGNMENT_LAYERS) == [1]
    assert g.get_float(K.TEMPERATURE) == pytest.approx(0.6) and g.get_int(K.TEXT_EOS_ID) == pair.nemo.eos_id


def test_every_stage_matches_nemo(pair: Pair) -> None:
    from ggtts.measure.magpie.parity import FRAMES, magpie_stages
    from ggtts.measure.parity import print_table

    results = magpie_stages(pair.nemo, pair.nemo_codec, pair.ours, pair.our_codec)
    print_table(results)
    assert {r.stage for r in results} >= {"enc.0", "dec.1", "dec.1(spk1)", "local", "codes", "codes_cfg", "codec"}
    assert all(r.ok for r in results), [r.stage for r in results if not r.ok]
    codes = next(r for r in results if r.stage == "codes_prior")
    assert codes.shape[1] == FRAMES >= 50


# the uncached loop recomputes every row at every step (its cost grows with the square of the length): half the
# parity run's frames, with the prior and guidance at work from the first step
UNCACHED_FRAMES = 60


@pytest.mark.parametrize(("cfg", "prior"), [(False, False), (True, False), (False, True), (True, True)])
def test_cached_generation_equals_uncached(pair: Pair, cfg: bool, prior: bool) -> None:
    from ggtts.measure.magpie.parity import our_codes, text_ids

    text = text_ids(pair.nemo)
    cached = our_codes(pair.ours, text, cfg=cfg, prior=prior, cached=True, frames=UNCACHED_FRAMES)
    assert cached.shape[1] == UNCACHED_FRAMES  # no early end: every step compared
    # two arithmetic paths: the uncached one teacher-forced along the cached codes, near-ties forgiven
    uncached = our_codes(pair.ours, text, cfg=cfg, prior=prior, cached=False, forced=cached, frames=UNCACHED_FRAMES)
    assert torch.equal(uncached, cached)


def test_guidance_and_the_prior_change_the_codes(pair: Pair) -> None:
    """Neither switch is a no-op on this model (else equal codes would prove nothing about them)."""
    from ggtts.measure.magpie.parity import our_codes, text_ids

    text = text_ids(pair.nemo)
    plain = our_codes(pair.ours, text, cfg=False, prior=False)
    assert not torch.equal(our_codes(pair.ours, text, cfg=True, prior=False), plain)
    assert not torch.equal(our_codes(pair.ours, text, cfg=False, prior=True), plain)
    # and NeMo's uncached loop (the newest prior over every row) differs from its cached one on this model
    own = our_codes(pair.ours, text, cfg=True, prior=True, cached=False, frames=UNCACHED_FRAMES)
    latest = our_codes(pair.ours, text, cfg=True, prior=True, cached=False, prior_rows="latest", frames=UNCACHED_FRAMES)
    assert not torch.equal(latest, own)


def test_a_codec_checkpoint_is_refused_by_the_magpie_converter(pair: Pair, tmp_path: Path) -> None:
    from ggtts.convert.magpie_nemo import convert_magpie
    from ggtts.errors import ConversionError

    with pytest.raises(ConversionError, match="not a Magpie TTS one"):
        convert_magpie([pair.work / "codec.nemo"], tmp_path / "x.gguf", "f32")
    assert not (tmp_path / "x.gguf").exists()


def _draw_at_quantile(probs: torch.Tensor, num_samples: int, **_: object) -> torch.Tensor:
    """A deterministic stand-in for torch.multinomial: the token where the cumulative probability passes 0.37.
    Both sides then "sample" the same token from the same distribution, so temperature and top-k are compared."""
    cumulative = probs.cumsum(-1)
    index = (cumulative < 0.37 * cumulative[..., -1:]).sum(-1, keepdim=True)
    return index.clamp(max=probs.shape[-1] - 1).expand(*probs.shape[:-1], num_samples)


QUANTILE_TIE = 1e-5  # a draw within this much probability of NeMo's interval counts as NeMo's (float32: ~1e-7)


def _quantile_forced(model: Any, params: Any, codes: torch.Tensor) -> Any:
    """Our generator drawing at the quantile, each draw following NeMo's (ggtts.measure.forcing)."""
    from ggtts.measure.forcing import draw_margin
    from ggtts.measure.magpie.parity import _Forced

    class QuantileForced(_Forced):
        def _draw(self, logits: torch.Tensor) -> torch.Tensor:  # (1, V) filtered
            probs = torch.softmax(logits / self.params.temperature, dim=-1)[0]
            cumulative = probs.double().cumsum(-1)
            x = 0.37 * float(cumulative[-1])
            mine = min(int((cumulative < x).sum()), probs.shape[-1] - 1)
            return torch.tensor([self.forcing.decide(mine, draw_margin(cumulative, x))], device=logits.device)

    return QuantileForced(model, params, codes, QUANTILE_TIE)


def test_sampling_with_temperature_and_top_k_equals_nemo(pair: Pair, monkeypatch: pytest.MonkeyPatch) -> None:
    from ggtts.families.magpie.generate import GenerationParams, generate_codes
    from ggtts.measure.magpie.parity import FRAMES, text_ids

    monkeypatch.setattr(torch, "multinomial", _draw_at_quantile)
    text = text_ids(pair.nemo)
    d = pair.ours.cfg.inference
    p = pair.nemo.inference_parameters
    p.temperature, p.topk, p.apply_attention_prior, p.max_decoder_steps = d.temperature, d.top_k, True, FRAMES
    pair.nemo.use_kv_cache_for_inference = True
    batch = {"text": text, "text_lens": torch.tensor([text.shape[1]]), "speaker_indices": 0}
    out = pair.nemo.infer_batch(batch, use_cfg=True, use_local_transformer_for_inference=True)
    ref = out.predicted_codes[0, :, : out.predicted_codes_lens[0]]
    params = GenerationParams(
        temperature=d.temperature, top_k=d.top_k, cfg_scale=d.cfg_scale, prior=True, prior_epsilon=d.prior_epsilon,
        prior_lookahead=d.prior_lookahead, prior_layers=d.prior_layers, alignment_layers=d.alignment_layers,
        max_frames=FRAMES,
    )  # fmt: skip
    forced = _quantile_forced(pair.ours, params, ref)  # every draw continues on NeMo's code
    ours = forced.own_picks(torch.cat(list(forced.frames(text[0].tolist(), 0)), dim=1))
    greedy = generate_codes(pair.ours, text[0].tolist(), 0, GenerationParams(**{**params.__dict__, "temperature": 0.0}))
    assert ref.shape[1] == FRAMES and torch.equal(ours, ref)
    assert len(forced.forcing.near_ties) <= forced.forcing.made // 4
    assert not torch.equal(ours, greedy)  # the draw is not the argmax: sampling was compared


@pytest.mark.parametrize("table", [0, 4], ids=["eos-first-frame-of-stack", "eos-second-frame-of-stack"])
def test_eos_ends_the_utterance_where_nemo_ends_it(pair: Pair, table: int) -> None:
    """The local transformer made to say EOS for one (frame, codebook) table: forbidden for the first 4 frames,
    then it ends the utterance at that frame of the stack (4 or 5 frames kept), as in NeMo."""
    from ggtts.measure.magpie.parity import nemo_codes, our_codes, text_ids

    eos = pair.ours.cfg.audio_eos_id
    heads = (pair.nemo.local_transformer_out_projections[table], pair.ours.local_transformer_out_projections[table])
    text = text_ids(pair.nemo)
    with torch.no_grad():
        for head in heads:
            head.bias[eos] += 1000.0
    try:
        ref = nemo_codes(pair.nemo, text, cfg=True, prior=True)
        ours = our_codes(pair.ours, text, cfg=True, prior=True, forced=ref)
    finally:
        with torch.no_grad():
            for head in heads:
                head.bias[eos] -= 1000.0
    assert ref.shape[1] == 4 + table // pair.ours.cfg.num_codebooks
    assert torch.equal(ours, ref)
