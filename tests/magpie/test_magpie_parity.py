"""Magpie TTS against NeMo's MagpieTTSModel: a tiny random model saved by NeMo, converted by our converter to a
real GGUF file, loaded by our loader; stages compared on the same inputs, and whole greedy generations compared
code for code with NeMo's ``infer_batch`` (local transformer on, as ``do_tts`` runs it)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

pytestmark = pytest.mark.needs_reference

FRAMES = 120  # codec frames generated per comparison (60 decoder steps of 2 stacked frames)
TOL = 1e-5  # max |ours - NeMo| / max |NeMo|, float32; measured: 0.0 (same ops in the same order)


@dataclass
class Pair:
    nemo: Any  # MagpieTTSModel
    ours: Any  # ggtts MagpieTTS
    gguf: Path
    source: Path


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Pair:
    pytest.importorskip("nemo.collections.tts", reason="needs NeMo (nemo_toolkit) to build the reference model")
    from nemo.collections.tts.models import MagpieTTSModel

    from ggtts.convert.magpie_nemo import convert_magpie
    from ggtts.families.magpie.upstream import build_tiny_codec
    from ggtts.families.magpie.upstream_tts import build_tiny_magpie
    from ggtts.gguf import GGUFFile
    from ggtts.models.magpie.model import load_magpie

    d = tmp_path_factory.mktemp("magpie")
    codec = build_tiny_codec(d / "codec.nemo", seed=0)
    source = build_tiny_magpie(d / "tiny-magpie.nemo", codec, seed=0)
    gguf = convert_magpie([source], d / "tiny-magpie.gguf", "f32")
    nemo = MagpieTTSModel.restore_from(str(source), map_location="cpu").eval()
    return Pair(nemo, load_magpie(GGUFFile(gguf)), gguf, source)


def _text(pair: Pair) -> torch.Tensor:
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(0, pair.nemo.bos_id, (1, 14), generator=g)
    ids[0, -1] = pair.nemo.eos_id
    return ids


def _rel(ours: torch.Tensor, ref: torch.Tensor) -> float:
    return float((ours - ref).abs().max() / ref.abs().max())


def test_converter_keeps_nemo_names_and_the_checkpoint_settings(pair: Pair) -> None:
    from ggtts.gguf import GGUFFile
    from ggtts.gguf.keys import Magpie as K

    g = GGUFFile(pair.gguf)
    state = {n for n in pair.nemo.state_dict() if not n.startswith("_codec_model.")}
    skipped = {n for n in state if n.endswith(("causal_mask", "_baked_embedding_T", "_baked_embedding_D"))}
    skipped |= {"baked_context_embedding_len"}
    assert set(g.names()) == state - skipped
    assert g.get_list(K.SPEAKER_NAMES) == ["Jason", "Aria", "Leo"]
    assert g.get_list(K.CONTEXT_LENGTHS) == [7, 5, 6]
    assert g.get_int(K.FRAME_STACKING) == 2 and g.get_int(K.LT_DIM) == 16
    assert g.get_list(K.PRIOR_LAYERS) == [0, 1] and g.get_list(K.ALIGNMENT_LAYERS) == [1]
    assert g.get_float(K.TEMPERATURE) == pytest.approx(0.6) and g.get_int(K.TEXT_EOS_ID) == pair.nemo.eos_id


@torch.inference_mode()
def test_encoder_decoder_and_heads_match_nemo(pair: Pair) -> None:
    from ggtts.models.magpie.model import LayerInputs

    nemo, ours = pair.nemo, pair.ours
    text = _text(pair)
    mask = torch.ones_like(text, dtype=torch.bool)
    ref_memory = nemo.encoder(nemo.text_embedding(text), mask, cond=None, cond_mask=None)["output"]
    memory = ours.encode_text(text)
    assert _rel(memory, ref_memory) <= TOL
    codes = torch.randint(0, 2016, (1, 4, 10), generator=torch.Generator().manual_seed(4))
    audio, _ = nemo.embed_audio_tokens(codes, torch.tensor([10]))
    assert _rel(ours.embed_frames(codes), audio) <= TOL
    for speaker in (0, 1):  # speaker 1's context is shorter than the table: its tail is masked
        context, length = nemo.get_baked_context_embeddings_batch(1, speaker)
        x = torch.cat([context, audio], dim=1)
        valid = torch.cat(
            [torch.arange(context.shape[1])[None] < length[:, None], torch.ones(1, 5, dtype=torch.bool)], 1
        )
        ref_logits, _, ref_hidden, _ = nemo.forward(x, valid, ref_memory, mask, None, None)
        hidden, _ = ours.decode(x, LayerInputs(key_valid=valid, memory=ours.memory_kv(memory), cross_rows=1))
        keep = valid[0]
        assert _rel(hidden[0, keep], ref_hidden[0, keep]) <= TOL
        assert _rel(ours.logits(hidden).flatten(-2)[0, keep], ref_logits[0, keep]) <= TOL
    # the local transformer over a latent and four codes, against NeMo's (compute_logits' layout)
    latent = ref_hidden[:, -1]
    lt_codes = codes[:, :, :2]
    ref_lt = nemo._lt_helper.compute_logits(latent[:, None], lt_codes)  # (1, 1, tables * V)
    rows = [ours.local_input(latent)]
    for table in range(ours.cfg.tables - 1):
        q, i = table % ours.cfg.num_codebooks, table // ours.cfg.num_codebooks
        rows.append(ours.local_code_input(table, lt_codes[:, q, i]))
    lt_out, _ = ours.local_transformer(torch.cat(rows, dim=1))
    lt = torch.cat([ours.local_logits(t, lt_out[:, t]) for t in range(ours.cfg.tables)], dim=-1)
    assert _rel(lt, ref_lt[:, 0]) <= TOL


def _nemo_codes(pair: Pair, text: torch.Tensor, cfg: bool, prior: bool) -> torch.Tensor:
    nemo = pair.nemo
    p = nemo.inference_parameters
    p.temperature, p.apply_attention_prior, p.max_decoder_steps = 0.0, prior, FRAMES
    nemo.use_kv_cache_for_inference = True
    batch = {"text": text, "text_lens": torch.tensor([text.shape[1]]), "speaker_indices": 0}
    out = nemo.infer_batch(batch, use_cfg=cfg, use_local_transformer_for_inference=True)
    return out.predicted_codes[0, :, : out.predicted_codes_lens[0]]


def _ours(pair: Pair, text: torch.Tensor, cfg: bool, prior: bool, cached: bool) -> torch.Tensor:
    from ggtts.families.magpie.generate import GenerationParams, generate_codes

    d = pair.ours.cfg.inference
    params = GenerationParams(
        temperature=0.0, cfg_scale=d.cfg_scale if cfg else None, prior=prior, prior_epsilon=d.prior_epsilon,
        prior_lookahead=d.prior_lookahead, prior_layers=d.prior_layers, alignment_layers=d.alignment_layers,
        max_frames=FRAMES, cached=cached,
    )  # fmt: skip
    return generate_codes(pair.ours, text[0].tolist(), 0, params)


@pytest.mark.parametrize("cfg", [False, True], ids=["no-cfg", "cfg"])
@pytest.mark.parametrize("prior", [False, True], ids=["no-prior", "prior"])
def test_greedy_codes_equal_nemo_and_cached_equals_uncached(pair: Pair, cfg: bool, prior: bool) -> None:
    text = _text(pair)
    ref = _nemo_codes(pair, text, cfg, prior)
    cached = _ours(pair, text, cfg, prior, cached=True)
    assert ref.shape[1] >= 50, "the comparison should cover at least 50 frames"
    assert torch.equal(cached, ref)
    assert torch.equal(_ours(pair, text, cfg, prior, cached=False), cached)


def test_guidance_and_the_prior_change_the_codes(pair: Pair) -> None:
    """Neither switch is a no-op on this model (else the comparisons above would prove nothing about them)."""
    text = _text(pair)
    plain = _ours(pair, text, cfg=False, prior=False, cached=True)
    assert not torch.equal(_ours(pair, text, cfg=True, prior=False, cached=True), plain)
    assert not torch.equal(_ours(pair, text, cfg=False, prior=True, cached=True), plain)


def test_a_codec_checkpoint_is_refused_by_the_magpie_converter(pair: Pair, tmp_path: Path) -> None:
    from ggtts.convert.magpie_nemo import convert_magpie
    from ggtts.errors import ConversionError

    codec = next(pair.source.parent.glob("codec.nemo"))
    with pytest.raises(ConversionError, match="not a Magpie TTS one"):
        convert_magpie([codec], tmp_path / "x.gguf", "f32")
    assert not (tmp_path / "x.gguf").exists()
