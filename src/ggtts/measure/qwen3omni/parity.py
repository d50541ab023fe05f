"""Qwen3-Omni's parity check (``ggtts parity qwen3omni``): ggtts against transformers, stage by stage.

A tiny random ``Qwen3OmniMoeForConditionalGeneration`` and its tokenizer are built and saved (:mod:`.upstream`),
converted by our converters to real thinker and talker GGUF files, and loaded by our pipeline. Stages:

- ``thinker.L`` / ``thinker.logits``: the thinker's hidden states after each layer and its logits over a chat
  prompt; ``thinker.reply``: its greedy answer, token for token (tolerance 0), teacher-forced along upstream's
  (:mod:`ggtts.measure.forcing`: a pick that differs only by a near-tie of :data:`TIE` counts as upstream's);
- ``talker.L`` / ``talker.logits``: the talker's layers and first-codebook logits over the prefill that
  ``generate`` builds from that chat (the same inputs given to both);
- ``codes``: the whole greedy ``generate(..., return_audio=True)`` path, code for code over every codebook
  (:data:`FRAMES` frames; tolerance 0; teacher-forced likewise); ``audio``: its waveform against ours end to end
  (``synthesize``), or against our code2wav of its codes where a near-tie was forgiven above;
- ``c2w.*``: code2wav's stages on the generated codes, and ``c2w.chunked``: ``chunked_decode(300, 25)`` on
  :data:`CHUNKED_FRAMES` random frames (several chunks) against upstream's.

Tolerances are on ``max |ours - upstream| / max |upstream|`` in float32. Besides the table, the difference between
upstream's chunked decoding and one-shot decoding (which ggtts streams) is printed.
"""

from __future__ import annotations

import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ggtts.errors import GGTTSError
from ggtts.measure.forcing import Forcing
from ggtts.measure.parity import StageResult, compare

FRAMES = 40
CHUNKED_FRAMES = 400
TOLERANCE = 1e-5
# A greedy pick of ours that differs from upstream's is forgiven where ours prefers its own by at most this logit
# margin: the two sides' logits of a step agree to float noise, and two kernels or CPUs may order a near-tie either
# way.
TIE = 1e-4
PROMPT = "Hello, world! How are you today?"
QUESTION = "What do you hear?"  # asked after the question audio
QUESTION_SECONDS = 2.53  # two whole 1 s chunks of the encoder and a part one


def build(work: Path) -> tuple[Any, Any]:
    """(transformers model, ggtts pipeline) of a tiny random checkpoint built and converted in ``work``."""
    try:
        import transformers  # noqa: F401
    except ModuleNotFoundError:
        raise GGTTSError("parity needs transformers (pip install transformers)") from None
    from ggtts.api import load
    from ggtts.convert.hf_checkpoint import HFCheckpoint
    from ggtts.convert.qwen3omni_audio import write_audio_encoder
    from ggtts.convert.qwen3omni_talker import write_talker
    from ggtts.convert.qwen3omni_thinker import write_thinker
    from ggtts.measure.qwen3omni.upstream import build_tiny_checkpoint

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        upstream = build_tiny_checkpoint(work / "checkpoint")
    ckpt = HFCheckpoint([work / "checkpoint"], "tiny Qwen3-Omni")
    write_thinker(work / "thinker.gguf", ckpt.config["thinker_config"], ckpt.tensors, work / "checkpoint", "f32")
    write_talker(work / "talker.gguf", ckpt.config, ckpt.tensors, "f32")
    write_audio_encoder(work / "mmproj.gguf", ckpt.config["thinker_config"], ckpt.tensors, "f32")
    return upstream, load(work / "thinker.gguf")


def upstream_generate(
    model: Any, prompt: list[int], frames: int, reply_tokens: int, **inputs: Any
) -> tuple[list[int], Any, Any]:
    """transformers' greedy ``generate(..., return_audio=True)``: (reply, codes (1, Q, N), audio (S,)). ``inputs``:
    more of the thinker's inputs (``input_features``, ``feature_attention_mask``)."""
    seen: dict[str, torch.Tensor] = {}
    original = model.code2wav.chunked_decode

    def capture(codes: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        seen["codes"] = codes.clone()
        return original(codes, **kwargs)

    model.code2wav.chunked_decode = capture
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            sequences, wav = model.generate(
                input_ids=torch.tensor([prompt]),
                return_audio=True,
                speaker="ethan",
                thinker_max_new_tokens=reply_tokens,
                thinker_do_sample=False,
                talker_do_sample=False,
                talker_max_new_tokens=frames + 1,
                **inputs,
            )
    finally:
        model.code2wav.chunked_decode = original
    return sequences[0, len(prompt) :].tolist(), seen["codes"], wav.reshape(-1)


class _ForcedPick:
    """transformers' greedy processors (:class:`HFSampler`), then the forced pick."""

    def __init__(self, forcing: Forcing, params: Any) -> None:
        from ggtts.families.qwen3omni.generate import HFSampler

        self.forcing, self.sampler = forcing, HFSampler(params, True, torch.Generator())

    def __call__(
        self, logits: torch.Tensor, history: Sequence[int] = (), suppressed: torch.Tensor | None = None
    ) -> int:
        return self.forcing.pick(self.sampler.scores(logits, history, suppressed))


def frame_forcings(codes: torch.Tensor, tie: float) -> tuple[Forcing, Forcing]:
    """The talker's and the code predictor's decisions to follow, from codes (1, Q, N): each frame's first code
    (and the decision that ends the loop), then the other codebooks frame by frame."""
    return Forcing([*codes[0, 0].tolist(), None], tie), Forcing(codes[0, 1:].T.flatten().tolist(), tie)


def forced_codes(first: Forcing, rest: Forcing, frames: int, codebooks: int) -> torch.Tensor:
    """Ours' own picks of ``frames`` frames as codes (1, codebooks, frames)."""
    others = torch.tensor(rest.picks()[: frames * (codebooks - 1)]).reshape(frames, codebooks - 1)
    return torch.tensor([first.picks()[:frames], *others.T.tolist()]).unsqueeze(0)


def _forced_reply(thinker: Any, prompt: list[int], reference: list[int]) -> Forcing:
    """The thinker's greedy reply (as ``Thinker.greedy`` runs it), each step fed upstream's token."""
    forcing = Forcing(reference, TIE)
    with torch.no_grad():
        cache = thinker.new_cache(len(prompt) + len(reference))
        logits = thinker(torch.tensor([prompt]), cache, last_only=True)
        for i in range(len(reference)):
            token = forcing.pick(logits[0, -1])
            if i + 1 < len(reference):
                logits = thinker(torch.tensor([[token]]), cache)
    return forcing


def _hidden(stack: Any, run: Any) -> tuple[list[torch.Tensor], Any]:
    """Each layer's output of ``stack`` while ``run()`` runs, and what ``run()`` returned."""
    out: list[torch.Tensor] = []
    handles = [
        layer.register_forward_hook(lambda _m, _a, o: out.append((o[0] if isinstance(o, tuple) else o).detach()))
        for layer in stack
    ]
    try:
        with torch.no_grad():
            result = run()
    finally:
        for h in handles:
            h.remove()
    return out, result


def _greedy_codes(talker: Any, inputs: Any, codes: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """Our greedy talker and code predictor on ``inputs``, teacher-forced along upstream's ``codes``: our own
    picks as codes, and whether a near-tie was forgiven."""
    from ggtts.families.qwen3omni.generate import TalkerSampling, generate_frames

    cfg = talker.cfg
    greedy = TalkerSampling(True, cfg.sampling, cfg.cp_sampling, max_frames=FRAMES)
    first, rest = frame_forcings(codes, TIE)
    pickers = (_ForcedPick(first, cfg.sampling), _ForcedPick(rest, cfg.cp_sampling))
    frames = list(generate_frames(talker, inputs, greedy, pickers=pickers))
    ties = bool(first.near_ties or rest.near_ties)
    return forced_codes(first, rest, len(frames), cfg.n_codebooks), ties


def stages(upstream: Any, tts: Any) -> list[StageResult]:
    from ggtts.families.qwen3omni.prompt import chat_prompt, talker_inputs

    talker, cfg = tts.talker, tts.talker.cfg
    thinker = tts._load_thinker()
    prompt = chat_prompt(lambda s: tts.tokenizer.encode(s, parse_special=False), cfg, PROMPT)
    ids = torch.tensor([prompt])
    pairs: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    tol: dict[str, tuple[str, float]] = {}

    def add(name: str, ours: torch.Tensor, theirs: torch.Tensor, exact: bool = False) -> None:
        pairs[name] = (ours.float() if not exact else ours, theirs.float() if not exact else theirs)
        tol[name] = ("int64", 0.0) if exact else ("float32", TOLERANCE)

    up_thinker = upstream.thinker
    theirs_h, theirs_logits = _hidden(up_thinker.model.language_model.layers, lambda: up_thinker(input_ids=ids).logits)
    out = thinker.run(ids, thinker.new_cache(len(prompt)), hidden_layers=range(1, thinker.cfg.n_layers))
    for i in range(thinker.cfg.n_layers - 1):
        add(f"thinker.{i}", out.hidden[i + 1], theirs_h[i])
    add("thinker.logits", out.logits, theirs_logits)

    reply, codes, audio = upstream_generate(upstream, prompt, FRAMES, 12)
    reply_forcing = _forced_reply(thinker, prompt, reply)
    add("thinker.reply", torch.tensor(reply_forcing.picks()), torch.tensor(reply), exact=True)

    inputs = talker_inputs(talker, tts.embedding, prompt, reply, cfg.speakers["ethan"])
    up_talker = upstream.talker
    theirs_t, theirs_tl = _hidden(up_talker.model.layers, lambda: up_talker(inputs_embeds=inputs.prefill).logits)
    with talker.modules_only():  # layer by layer: the torch modules' hooks see each layer
        ours_t, _ = _hidden(talker.blk, lambda: talker.step(inputs.prefill, talker.new_cache(inputs.prefill.shape[1])))
    for i in range(cfg.talker.n_layers):
        add(f"talker.{i}", ours_t[i], theirs_t[i])
    with torch.no_grad():
        add("talker.logits", talker.output(talker.output_norm(ours_t[-1])), theirs_tl)
        # the step as generation runs it (on the CPU one ggml graph): the last row's logits
        _, last = talker.step(inputs.prefill, talker.new_cache(inputs.prefill.shape[1]))
    add("talker.step.logits", last, theirs_tl[0, -1])

    ours_codes, ties = _greedy_codes(talker, inputs, codes)
    add("codes", ours_codes, codes, exact=True)
    if reply_forcing.near_ties or ties:  # our own free run may have gone elsewhere
        ours_audio = tts.code2wav.chunked_decode(codes).reshape(-1)
    else:
        ours_audio = torch.from_numpy(
            tts.synthesize(PROMPT, voice="ethan", mode="chat", temperature=0, max_frames=FRAMES,
                           max_reply_tokens=12).samples
        )  # fmt: skip
    add("audio", ours_audio, audio)

    audio_stages(upstream, tts, add)

    from ggtts.models.qwen3omni_code2wav.parity import stage_outputs

    mine, theirs = stage_outputs(tts.code2wav, upstream.code2wav, codes)
    for name in mine:
        add(f"c2w.{name}", mine[name], theirs[name])
    c2w = tts.code2wav.cfg
    shape = (1, c2w.num_quantizers, CHUNKED_FRAMES)
    random_codes = torch.randint(0, c2w.codebook_size, shape, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        theirs_chunked = upstream.code2wav.chunked_decode(random_codes, chunk_size=300, left_context_size=25)
        oneshot = upstream.code2wav(random_codes)
    add("c2w.chunked", tts.code2wav.chunked_decode(random_codes), theirs_chunked)
    n = theirs_chunked.shape[-1]
    print(
        f"parity: upstream chunked_decode(300, 25) vs one-shot on {CHUNKED_FRAMES} random frames: "
        f"{oneshot.shape[-1] - n} samples shorter, max |diff| over the common start "
        f"{float((theirs_chunked - oneshot[..., :n]).abs().max()):.3g} (ggtts streams the one-shot decoding)"
    )
    return [compare(name, a, b, tol) for name, (a, b) in pairs.items()]


def question_audio(seconds: float = QUESTION_SECONDS) -> Any:
    """A fixed 16 kHz test signal: a warbling tone in noise (the same every run)."""
    t = np.arange(int(seconds * 16000)) / 16000
    noise = np.random.default_rng(0).standard_normal(t.size)
    return (0.3 * np.sin(2 * np.pi * (220 + 40 * np.sin(2 * np.pi * 2 * t)) * t) + 0.05 * noise).astype(np.float32)


def audio_stages(upstream: Any, tts: Any, add: Any) -> None:
    """The question asked as audio: ``audio.features`` (ours against transformers' WhisperFeatureExtractor),
    ``audio.encoder`` (the mmproj file's encoder against the thinker's audio tower), ``thinker.audio.L`` /
    ``thinker.audio.logits`` over a chat whose user turn is the audio and a text, ``thinker.audio.reply`` (greedy,
    teacher-forced as above), ``audio.codes`` (the talker's codes for that answer, its audio rows through
    ``hidden_proj`` of the thinker's ``accept_hidden_layer``) and ``audio.audio`` (``chat(audio=...)`` end to end)."""
    from transformers import WhisperFeatureExtractor

    from ggtts.families.qwen3omni.prompt import chat_prompt, talker_inputs
    from ggtts.models.qwen3omni_audio.features import log_mel

    talker, cfg = tts.talker, tts.talker.cfg
    thinker, encoder = tts._load_thinker(), tts._load_encoder()
    samples = question_audio()
    extractor = WhisperFeatureExtractor(feature_size=encoder.cfg.n_mel, sampling_rate=16000, hop_length=160,
                                        chunk_length=300, n_fft=400)  # fmt: skip
    theirs = extractor(samples, sampling_rate=16000, padding=True, truncation=False, return_attention_mask=True,
                       return_tensors="pt")  # fmt: skip
    frames = int(theirs["attention_mask"].sum())
    features = theirs["input_features"][:, :, :frames]
    mask = torch.ones(1, frames, dtype=torch.long)
    ours_features = log_mel(samples, encoder.cfg.n_mel)
    add("audio.features", ours_features, features[0])
    with torch.no_grad():
        theirs_rows = upstream.thinker.get_audio_features(features, mask).last_hidden_state
    rows = tts.listen(samples)
    add("audio.encoder", rows, theirs_rows)

    span = tts.audio_ids().span(int(rows.shape[0]))
    prompt = chat_prompt(lambda s: tts.tokenizer.encode(s, parse_special=False), cfg, QUESTION, audio=span)
    ids = torch.tensor([prompt])
    up_thinker = upstream.thinker
    theirs_h, theirs_logits = _hidden(
        up_thinker.model.language_model.layers,
        lambda: up_thinker(input_ids=ids, input_features=features, feature_attention_mask=mask).logits,
    )
    placed = [i for i, t in enumerate(prompt) if t == tts.audio_ids().pad]
    embeddings = thinker.embed(ids).clone()
    embeddings[0, placed] = rows
    out = thinker.run(None, thinker.new_cache(len(prompt)), embeddings=embeddings,
                      hidden_layers=range(1, thinker.cfg.n_layers))  # fmt: skip
    for i in range(thinker.cfg.n_layers - 1):
        add(f"thinker.audio.{i}", out.hidden[i + 1], theirs_h[i])
    add("thinker.audio.logits", out.logits, theirs_logits)

    reply, codes, audio = upstream_generate(
        upstream, prompt, FRAMES, 12, input_features=features, feature_attention_mask=mask
    )
    forcing = Forcing(reply, TIE)
    with torch.no_grad():
        cache = thinker.new_cache(len(prompt) + len(reply))
        first_out = thinker.run(None, cache, embeddings=embeddings, hidden_layers=(cfg.accept_hidden_layer,),
                                last_only=True)  # fmt: skip
        logits = first_out.logits
        for k in range(len(reply)):
            token = forcing.pick(logits[0, -1])
            if k + 1 < len(reply):
                logits = thinker(torch.tensor([[token]]), cache)
    add("thinker.audio.reply", torch.tensor(forcing.picks()), torch.tensor(reply), exact=True)

    hidden = first_out.hidden[cfg.accept_hidden_layer][0]
    heard = {i: hidden[i] for i in placed}
    inputs = talker_inputs(talker, tts.embedding, prompt, reply, cfg.speakers["ethan"], heard)
    ours_codes, ties = _greedy_codes(talker, inputs, codes)
    add("audio.codes", ours_codes, codes, exact=True)
    if forcing.near_ties or ties:  # our own free run may have gone elsewhere
        ours_audio = tts.code2wav.chunked_decode(codes).reshape(-1)
    else:
        answer = tts.chat(QUESTION, audio=samples, voice="ethan", temperature=0, max_frames=FRAMES,
                          max_reply_tokens=12)  # fmt: skip
        ours_audio = torch.from_numpy(np.concatenate([a.samples for a in answer.audio]))
    add("audio.audio", ours_audio, audio)


def qwen3omni_parity() -> list[StageResult]:
    with tempfile.TemporaryDirectory() as tmp:
        upstream, tts = build(Path(tmp))
        return stages(upstream, tts)
