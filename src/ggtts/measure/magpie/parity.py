"""Magpie's parity check (``ggtts parity magpie``): ggtts against NeMo, stage by stage.

A tiny random ``MagpieTTSModel`` and nano codec are built and saved by NeMo (:mod:`.upstream_tts`,
:mod:`.upstream`), converted by our converters to real GGUF files and loaded by our loaders; both sides then get
the same inputs at every stage:

- ``enc.L`` / ``encoder``: each text-encoder layer's output and the final (normed) memory;
- ``dec.L`` / ``decoder``: each decoder layer over ``[speaker context ; audio frames]`` (speaker 1's context is
  shorter than the table: only its valid rows are compared) and the final hidden states;
- ``final_proj``: the parallel head's logits; ``audio_emb``: the mean of the codebook embeddings;
- ``local``: the local transformer's logits for every codebook of a frame stack (teacher-forced);
- ``codes``, ``codes_cfg``, ``codes_prior``: whole greedy generations (120 frames) against NeMo's ``infer_batch``
  with its KV cache, compared code for code (tolerance 0: any different code fails); ``codes_prior_nemo_uncached``:
  NeMo's loop without the cache (the newest prior over every row, as ``do_tts`` runs) against ggtts's
  ``prior_rows="latest"``;
- ``codec``: the nano codec's audio for the generated codes.

Tolerances are on ``max |ours - NeMo| / max |NeMo|`` in float32; every stage measures 0.0 or float rounding
(same operations in the same order), and a 1e-5 relative error in any weight fails its stage.
"""

from __future__ import annotations

import contextlib
import io
import tempfile
import warnings
from pathlib import Path
from typing import Any

import torch

from ggtts.errors import GGTTSError
from ggtts.families.magpie.generate import MagpieGenerator
from ggtts.measure.forcing import Forcing
from ggtts.measure.parity import StageResult, compare

FRAMES = 120
TOLERANCE = 1e-5
EXACT = 0.0


def _tolerances(stages: list[str]) -> dict[str, tuple[str, float]]:
    return {s: ("int64" if s.startswith("codes") else "float32", EXACT if s.startswith("codes") else TOLERANCE)
            for s in stages}  # fmt: skip


def _layer_outputs(stack: Any) -> tuple[list[torch.Tensor], list[Any]]:
    """Hooks collecting each layer's output of a NeMo or ggtts transformer stack."""
    outputs: list[torch.Tensor] = []

    def hook(_module: Any, _args: Any, out: Any) -> None:
        outputs.append(out["output"] if isinstance(out, dict) else out[0])

    return outputs, [layer.register_forward_hook(hook) for layer in stack.layers]


def build_pair(work: Path) -> tuple[Any, Any, Any, Any]:
    """(NeMo model, NeMo codec, ggtts model, ggtts codec) of a tiny random checkpoint built in ``work``."""
    try:
        from nemo.collections.tts.models import AudioCodecModel, MagpieTTSModel
    except ModuleNotFoundError as e:
        raise GGTTSError(f"parity needs NeMo ('{e.name}' is missing: pip install 'ggtts[nemo]')") from None
    from ggtts.convert.magpie_nemo import convert_magpie
    from ggtts.convert.nanocodec_nemo import convert_nanocodec
    from ggtts.gguf import GGUFFile
    from ggtts.measure.magpie.upstream import build_tiny_codec
    from ggtts.measure.magpie.upstream_tts import build_tiny_magpie
    from ggtts.models.magpie.model import load_magpie
    from ggtts.models.nanocodec.model import NanoCodec

    codec_nemo = build_tiny_codec(work / "codec.nemo", seed=0)
    tts_nemo = build_tiny_magpie(work / "tiny-magpie.nemo", codec_nemo, seed=0)
    tts_gguf = convert_magpie([tts_nemo], work / "tiny-magpie.gguf", "f32")
    codec_gguf = convert_nanocodec([codec_nemo], work / "tiny-codec.gguf", "f32")
    nemo = MagpieTTSModel.restore_from(str(tts_nemo), map_location="cpu").eval()
    nemo_codec = AudioCodecModel.restore_from(str(codec_nemo), map_location="cpu").eval()
    return nemo, nemo_codec, load_magpie(GGUFFile(tts_gguf)), NanoCodec.from_gguf(GGUFFile(codec_gguf))


def text_ids(nemo: Any, n: int = 14, seed: int = 3) -> torch.Tensor:
    ids = torch.randint(0, nemo.bos_id, (1, n), generator=torch.Generator().manual_seed(seed))
    ids[0, -1] = nemo.eos_id
    return ids


@torch.inference_mode()
def _stage_tensors(nemo: Any, ours: Any, text: torch.Tensor) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    from ggtts.models.magpie.model import LayerInputs

    pairs: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    mask = torch.ones_like(text, dtype=torch.bool)
    theirs_l, h1 = _layer_outputs(nemo.encoder)
    ours_l, h2 = _layer_outputs(ours.encoder)
    ref_memory = nemo.encoder(nemo.text_embedding(text), mask, cond=None, cond_mask=None)["output"]
    memory = ours.encode_text(text)
    for h in h1 + h2:
        h.remove()
    for i, (a, b) in enumerate(zip(ours_l, theirs_l, strict=True)):
        pairs[f"enc.{i}"] = (a, b)
    pairs["encoder"] = (memory, ref_memory)
    codes = torch.randint(
        0, nemo.codebook_size, (1, nemo.num_audio_codebooks, 10), generator=torch.Generator().manual_seed(4)
    )
    audio, _ = nemo.embed_audio_tokens(codes, torch.tensor([codes.shape[-1]]))
    pairs["audio_emb"] = (ours.embed_frames(codes), audio)
    for speaker in (0, 1):
        context, length = nemo.get_baked_context_embeddings_batch(1, speaker)
        x = torch.cat([context, audio], dim=1)
        valid = torch.cat(
            [torch.arange(context.shape[1])[None] < length[:, None], torch.ones(1, audio.shape[1], dtype=torch.bool)], 1
        )
        keep = valid[0]
        theirs_l, h1 = _layer_outputs(nemo.decoder)
        ours_l, h2 = _layer_outputs(ours.decoder)
        ref_logits, _, ref_hidden, _ = nemo.forward(x, valid, ref_memory, mask, None, None)
        hidden, _ = ours.decode(x, LayerInputs(key_valid=valid, memory=ours.memory_kv(memory), cross_rows=1))
        for h in h1 + h2:
            h.remove()
        suffix = "" if speaker == 0 else f"(spk{speaker})"
        for i, (a, b) in enumerate(zip(ours_l, theirs_l, strict=True)):
            pairs[f"dec.{i}{suffix}"] = (a[0, keep], b[0, keep])
        pairs[f"decoder{suffix}"] = (hidden[0, keep], ref_hidden[0, keep])
        pairs[f"final_proj{suffix}"] = (ours.logits(hidden).flatten(-2)[0, keep], ref_logits[0, keep])
    latent = ref_hidden[:, -1]
    stack = codes[:, :, : nemo.frame_stacking_factor]
    ref_local = nemo._lt_helper.compute_logits(latent[:, None], stack)[:, 0]  # (1, tables * V)
    rows = [ours.local_input(latent)]
    for table in range(ours.cfg.tables - 1):
        q, i = table % ours.cfg.num_codebooks, table // ours.cfg.num_codebooks
        rows.append(ours.local_code_input(table, stack[:, q, i]))
    out, _ = ours.local_transformer(torch.cat(rows, dim=1))
    pairs["local"] = (torch.cat([ours.local_logits(t, out[:, t]) for t in range(ours.cfg.tables)], dim=-1), ref_local)
    return pairs


def nemo_codes(
    nemo: Any, text: torch.Tensor, *, cfg: bool, prior: bool, frames: int = FRAMES, cached: bool = True
) -> torch.Tensor:
    """NeMo's greedy generation for speaker 0, with its decoder KV cache or without (codes (C, T))."""
    p = nemo.inference_parameters
    p.temperature, p.apply_attention_prior, p.max_decoder_steps = 0.0, prior, frames
    nemo.use_kv_cache_for_inference = cached
    batch = {"text": text, "text_lens": torch.tensor([text.shape[1]]), "speaker_indices": 0}
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):  # it prints every 20 steps
        warnings.simplefilter("ignore")
        out = nemo.infer_batch(batch, use_cfg=cfg, use_local_transformer_for_inference=True)
    return out.predicted_codes[0, :, : out.predicted_codes_lens[0]]


# A greedy pick of ours that differs from NeMo's is forgiven where ours prefers its own code by at most this logit
# margin (both sides' logits of a step agree to ~1e-6; two kernels or CPUs may order a near-tie either way).
TIE = 1e-4


def our_codes(
    ours: Any,
    text: torch.Tensor,
    *,
    cfg: bool,
    prior: bool,
    cached: bool = True,
    frames: int = FRAMES,
    prior_rows: str = "own",
    forced: torch.Tensor | None = None,
) -> torch.Tensor:
    """Our greedy codes (C, T). With ``forced`` (NeMo's codes), teacher-forced: every local-transformer pick
    continues on NeMo's code, and the codes returned are ours' own picks, except where ours preferred its own code
    by at most :data:`TIE` (a near-tie, forgiven: NeMo's code is returned there)."""
    from ggtts.families.magpie.generate import GenerationParams, generate_codes

    d = ours.cfg.inference
    params = GenerationParams(
        temperature=0.0, cfg_scale=d.cfg_scale if cfg else None, prior=prior, prior_epsilon=d.prior_epsilon,
        prior_lookahead=d.prior_lookahead, prior_layers=d.prior_layers, alignment_layers=d.alignment_layers,
        max_frames=frames, cached=cached, prior_rows=prior_rows,
    )  # fmt: skip
    if forced is None:
        return generate_codes(ours, text[0].tolist(), 0, params)
    generator = _Forced(ours, params, forced)
    parts = list(generator.frames(text[0].tolist(), 0))
    codes = torch.cat(parts, dim=1) if parts else torch.zeros(ours.cfg.num_codebooks, 0, dtype=torch.long)
    return generator.own_picks(codes)


class _Forced(MagpieGenerator):
    """A generator whose local-transformer draws follow given codes (C, T) (:mod:`ggtts.measure.forcing`)."""

    def __init__(self, model: Any, params: Any, codes: torch.Tensor, tie: float = TIE) -> None:
        super().__init__(model, params)
        c, s = self.cfg.num_codebooks, self.cfg.frame_stacking
        steps = -(-codes.shape[1] // s)
        # the draws in the loop's order: decoder step, then table (codebook + frame in the stack * C)
        self.order = [(t % c, step * s + t // c) for step in range(steps) for t in range(self.cfg.tables)]
        n = codes.shape[1]
        self.forcing = Forcing([int(codes[q, f]) if f < n else None for q, f in self.order], tie)

    def _draw(self, logits: torch.Tensor) -> torch.Tensor:  # (1, V) filtered
        return torch.tensor([self.forcing.pick(logits[0])], device=logits.device)

    def own_picks(self, generated: torch.Tensor) -> torch.Tensor:
        """The generated codes (C, T) with ours' own picks where it followed the given codes."""
        own = generated.clone()
        for (q, f), code in zip(self.order, self.forcing.picks(), strict=False):
            if f < own.shape[1] and code is not None:
                own[q, f] = code
        return own


def magpie_stages(nemo: Any, nemo_codec: Any, ours: Any, our_codec: Any) -> list[StageResult]:
    text = text_ids(nemo)
    pairs = _stage_tensors(nemo, ours, text)
    for name, cfg, prior in (("codes", False, False), ("codes_cfg", True, False), ("codes_prior", True, True)):
        ref = nemo_codes(nemo, text, cfg=cfg, prior=prior)
        pairs[name] = (our_codes(ours, text, cfg=cfg, prior=prior, forced=ref), ref)
    # NeMo without its cache (do_tts's loop): the newest prior over every row, which ggtts's "latest" mode follows
    ref = nemo_codes(nemo, text, cfg=True, prior=True, cached=False)
    pairs["codes_prior_nemo_uncached"] = (
        our_codes(ours, text, cfg=True, prior=True, cached=False, prior_rows="latest", forced=ref),
        ref,
    )
    codes = pairs["codes_prior"][1]
    with torch.inference_mode():
        ref_audio, _ = nemo_codec.decode(tokens=codes[None], tokens_len=torch.tensor([codes.shape[1]]))
        pairs["codec"] = (our_codec.decode(codes), ref_audio[0])
    tolerances = _tolerances(list(pairs))
    return [compare(name, a, b, tolerances) for name, (a, b) in pairs.items()]


def magpie_parity() -> list[StageResult]:
    """Build, convert, load and run a tiny Magpie and codec both ways; one result per stage."""
    with tempfile.TemporaryDirectory(prefix="ggtts-parity-") as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore", (UserWarning, FutureWarning))
        return magpie_stages(*build_pair(Path(tmp)))
