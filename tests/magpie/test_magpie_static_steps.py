"""Magpie's steps over fixed tensors (:mod:`ggtts.models.magpie.static_steps` and
:class:`~ggtts.families.magpie.generate.DeviceFrame`: what CUDA captures once and replays), run eagerly on the CPU
against the torch modules on the same weights (a tiny random NeMo model through the converter): every cached
decoder step of whole generations from a copy of the same cache (guidance on and off, the prior on, a speaker whose
context is padded), the codes they lead to teacher-forced, the local transformer's filters and draws."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import pytest
import torch

pytestmark = pytest.mark.needs_reference

STEPS = 40  # decoder steps a generation runs (frame stacking 2: 80 frames)
TEXT = [3, 9, 14, 2, 7, 11, 5, 8, 12, 6, 4]
DRAWS = 4000  # draws of one distribution by the exponential race
# total variation between DRAWS draws and their distribution over 8 codes: about 0.02 expected (measured 0.022 with
# this seed); a race that multiplies by the noise instead of dividing measured 0.16
RACE_TOLERANCE = 0.05


@pytest.fixture(scope="module")
def nemo_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("nemo.collections.tts", reason="needs NeMo (nemo_toolkit) to build the reference model")
    from ggtts.measure.magpie.upstream import build_tiny_codec
    from ggtts.measure.magpie.upstream_tts import build_tiny_magpie

    d = tmp_path_factory.mktemp("magpie-static")
    return build_tiny_magpie(d / "tiny-magpie.nemo", build_tiny_codec(d / "codec.nemo", seed=0), seed=0)


@pytest.fixture(scope="module")
def tiny(nemo_file: Path) -> Path:
    from ggtts.convert.magpie_nemo import convert_magpie

    return convert_magpie([nemo_file], nemo_file.parent / "tiny-f32.gguf", "f32")


def _load(path: Path, static: bool) -> Any:
    from ggtts.gguf import GGUFFile
    from ggtts.models.magpie.model import load_magpie

    model = load_magpie(GGUFFile(path), graph=False)  # the torch modules (ggml's graphs are another test's)
    if static:
        model.use_static_steps(capture=False)
    return model


def _params(model: Any, cfg: bool, steps: int = STEPS, temperature: float = 0.0, seed: int | None = 0) -> Any:
    from ggtts.families.magpie.generate import GenerationParams

    d = model.cfg.inference
    return GenerationParams(
        temperature=temperature, cfg_scale=d.cfg_scale if cfg else None, prior=True, prior_layers=d.prior_layers,
        alignment_layers=d.alignment_layers, max_frames=steps * model.cfg.frame_stacking,
        min_frames=steps * model.cfg.frame_stacking + 1, seed=seed,
    )  # fmt: skip


def _generate(model: Any, cfg: bool, speaker: int, **kw: Any) -> torch.Tensor:
    from ggtts.families.magpie.generate import generate_codes

    return generate_codes(model, [*TEXT, model.cfg.text_eos_id], speaker, _params(model, cfg, **kw))


def _relative(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).norm() / want.norm())


@pytest.mark.parametrize(("cfg", "speaker"), [(True, 0), (True, 1), (False, 1)])
def test_static_steps_match_the_modules(tiny: Path, cfg: bool, speaker: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each fixed-tensor step against the modules' cached step on a copy of the cache as it was: the last rows, the
    head's logits, each layer's cross-attention over the text (nothing on the padding past it), the keys and values
    written. The first (the text encoder over the padded text and the context's prefill, one graph) against the
    modules' over the text alone: the text's keys and values, the last rows, the probabilities, the cache. Then the
    modules' own greedy picks along the codes the steps chose are those codes."""
    from ggtts.measure.magpie.parity import _Forced
    from ggtts.models.layers.kv_cache import KVCache
    from ggtts.models.magpie.model import LayerInputs
    from ggtts.models.magpie.static_steps import StaticDecoder

    model = _load(tiny, static=True)
    errors: list[float] = []
    real_step = StaticDecoder.step

    def shadowed(self: StaticDecoder, owner: object, x: torch.Tensor, position: int) -> Any:
        s = int(self.memory_valid.sum())
        twin = KVCache.__new__(KVCache)
        twin.k, twin.v, twin.max_len, twin.length = self.cache.k.clone(), self.cache.v.clone(), self.capacity, 0
        got = real_step(self, owner, x, position)
        memory = [(k[:, :, :s], v[:, :, :s]) for k, v in self.memory]
        priors = [p[:, :, :s] for p in self.priors]  # ones on a layer without the prior: the same renormalisation
        inputs = LayerInputs(cache=twin, start=position, key_valid=self.key_valid, memory=memory, cross_rows=1,
                             priors=list(priors))  # fmt: skip
        hidden, probs = model.decode(x, inputs)
        want = hidden[:, -1]
        pairs = [(got.hidden, want), (got.logits, model.logits(want))]
        pairs += [(g[..., :s], w) for g, w in zip(got.probs, probs, strict=True) if w is not None]
        at = slice(position, position + 1)
        pairs += [(self.cache.k[:, :, :, at], twin.k[:, :, :, at]), (self.cache.v[:, :, :, at], twin.v[:, :, :, at])]
        errors.append(max(_relative(g, w) for g, w in pairs))
        assert all(float(p[..., s:].abs().max()) == 0.0 for p in got.probs if p is not None)
        return got

    real_prefill = StaticDecoder.prefill

    def shadowed_prefill(self: StaticDecoder, owner: object, context: torch.Tensor) -> Any:
        s, rows = int(self.memory_valid.sum()), self.rows
        got_hidden, got_probs = real_prefill(self, owner, context)
        memory = model.memory_kv(model.encode_text(self.text[:, :s]))
        twin = KVCache.__new__(KVCache)
        twin.k, twin.v, twin.max_len, twin.length = (
            torch.zeros_like(self.cache.k),
            torch.zeros_like(self.cache.v),
            self.capacity,
            0,
        )
        hidden, probs = model.prefill(context, self.bos, twin, self.key_valid, memory)
        pairs = [(got_hidden, hidden)] + [
            (g[..., :s], w) for g, w in zip(got_probs, probs, strict=True) if w is not None
        ]
        pairs += [
            (fixed[:, :, :s], kv)
            for pair, fixed_pair in zip(memory, self.memory, strict=True)
            for kv, fixed in zip(pair, fixed_pair, strict=True)
        ]
        assert all(float(p[..., s:].abs().max()) == 0.0 for p in got_probs if p is not None)
        tc1 = context.shape[0] + 1
        pairs += [
            (self.cache.k[:, :rows, :, :tc1], twin.k[:, :, :, :tc1]),
            (self.cache.v[:, :rows, :, :tc1], twin.v[:, :, :, :tc1]),
        ]
        errors.append(max(_relative(g, w) for g, w in pairs))
        return got_hidden, got_probs

    monkeypatch.setattr(StaticDecoder, "step", shadowed)
    monkeypatch.setattr(StaticDecoder, "prefill", shadowed_prefill)
    codes = _generate(model, cfg, speaker)
    assert codes.shape[1] == STEPS * model.cfg.frame_stacking
    assert len(errors) == STEPS  # the prefill and every step after it
    print(f"cfg={cfg} speaker={speaker}: worst step {max(errors):.1e}")
    assert max(errors) < 1e-5
    modules = _load(tiny, static=False)
    forced = _Forced(modules, _params(modules, cfg), codes)
    picks = forced.own_picks(torch.cat(list(forced.frames([*TEXT, modules.cfg.text_eos_id], speaker)), dim=1))
    assert torch.equal(picks, codes)


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_the_gpu_steps_trace_whole(tiny: Path, temperature: float) -> None:
    """The decoder's fixed-tensor step, its prefill (the text encoder with it) and the local transformer's device
    frame (as a GPU captures them, made by a generation) each trace as one graph with no break: nothing in them is
    read on the host (which would wait for the GPU, and which a CUDA graph cannot hold), and ``torch.compile`` can
    fuse each whole."""
    import torch._dynamo as dynamo

    model = _load(tiny, static=True)
    _generate(model, True, 0, temperature=temperature)
    decoders, frames = model.static_steps().decoders, list(model.device_frames.values())
    assert len(decoders) == 1 and len(frames) == 1
    dynamo.reset()
    with torch.inference_mode():
        decoder = next(iter(decoders.values()))
        for traced in (decoder.graph.step, decoder.prefill_graph.step, frames[0].graph.step):
            explained = dynamo.explain(traced)()
            assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons


def test_the_frames_filters_are_the_host_loops(tiny: Path) -> None:
    """The device frame's filter (forbidden ids, EOS while it is forbidden, top-k) and guidance give the host
    loop's logits."""
    from ggtts.families.magpie.generate import DeviceFrame, MagpieGenerator

    model = _load(tiny, static=True)
    params = _params(model, True, temperature=0.7)
    frame, host = DeviceFrame(model, params, 2, capture=False), MagpieGenerator(model, params)
    logits = torch.randn(2, 3, model.cfg.tokens_per_codebook, generator=torch.Generator().manual_seed(1))
    for forbid in (False, True):
        frame.forbid_eos.fill_(forbid)
        assert torch.equal(frame._filter(frame._guided(logits)), host._filter(host._guided(logits), forbid))


def test_the_race_draws_from_the_filtered_distribution(tiny: Path) -> None:
    """A draw of the device frame (the argmax of the probabilities over Exp(1) noise) follows the distribution the
    host loop's multinomial draws from: top-k 8 at the model's temperature, DRAWS draws."""
    import dataclasses

    from ggtts.families.magpie.generate import DeviceFrame

    model = _load(tiny, static=True)
    params = dataclasses.replace(_params(model, False, temperature=0.7), top_k=8)
    frame = DeviceFrame(model, params, 1, capture=False).reseed(5)
    logits = frame._filter(torch.randn(1, model.cfg.tokens_per_codebook, generator=torch.Generator().manual_seed(2)))
    want = torch.softmax(logits / params.temperature, dim=-1)[0]
    counts = torch.zeros_like(want)
    for _ in range(DRAWS):
        frame.noise.exponential_(generator=frame.generator)
        counts[int(frame._pick(logits, 0))] += 1
    distance = float((counts / DRAWS - want).abs().sum() / 2)
    print(f"total variation {distance:.3f}")
    assert distance < RACE_TOLERANCE
    assert int((counts > 0).sum()) == 8  # only the top 8, each drawn


def test_sampled_generations_follow_their_seed(tiny: Path) -> None:
    model = _load(tiny, static=True)
    first = _generate(model, True, 0, steps=12, temperature=0.7, seed=3)
    assert torch.equal(_generate(model, True, 0, steps=12, temperature=0.7, seed=3), first)
    assert not torch.equal(_generate(model, True, 0, steps=12, temperature=0.7, seed=4), first)


def test_one_utterance_at_a_time_and_copies_of_their_own(tiny: Path) -> None:
    """A fixed cache serves one utterance: stepping one that a newer utterance displaced is an error (not its steps
    on the newer one's cache); a copy of the model has fixed tensors of its own."""
    from ggtts.families.magpie.generate import MagpieGenerator

    model = _load(tiny, static=True)
    ids = [*TEXT, model.cfg.text_eos_id]
    older = MagpieGenerator(model, _params(model, True)).frames(ids, 0)
    next(older)
    newer = MagpieGenerator(model, _params(model, True)).frames(ids, 0)
    next(newer)
    with pytest.raises(RuntimeError, match="taken by a newer utterance"):
        next(older)
    twin = copy.deepcopy(model)
    assert twin.static_capture is False and twin.static_steps() is not model.static_steps()
    assert torch.equal(_generate(twin, True, 0, steps=8), _generate(model, True, 0, steps=8))


def test_a_model_and_its_fixed_tensors_are_freed_together(tiny: Path) -> None:
    """The decoders and frames over fixed tensors (GPU memory, on a GPU) live and go with their model: a server or a
    benchmark that drops a model gets the memory back."""
    import gc
    import weakref

    model = _load(tiny, static=True)
    _generate(model, True, 0, steps=4)
    assert model.device_frames and model.static_steps() is not None
    gone = weakref.ref(model)
    del model
    gc.collect()
    assert gone() is None


def test_the_null_rows_keys_follow_the_model(tiny: Path) -> None:
    """Guidance's null-row keys and values, kept once computed, are made again on the model's device when the kept
    ones are elsewhere (a captured prefill copies them in: a host copy there would break the capture)."""
    model = _load(tiny, static=False)
    k, v = model.null_context_kv()
    assert model.null_context_kv()[0] is k  # kept
    model._null_kv = (k.to("meta"), v.to("meta"))  # as if computed before the model moved
    again = model.null_context_kv()
    assert again[0].device == k.device and torch.equal(again[0], k) and torch.equal(again[1], v)


def test_a_position_past_the_table_is_one_clear_error(tiny: Path) -> None:
    """CUDA would stop on a device-side assert at a row past the learned positions: the step refuses first; and a
    text longer than the encoder's positions is refused before any fixed tensors are made for it."""
    from ggtts.errors import InputError
    from ggtts.families.magpie.generate import generate_codes

    model = _load(tiny, static=True)
    with pytest.raises(InputError, match="past the decoder's 256 learned positions"):
        _generate(model, False, 0, steps=model.cfg.decoder.max_positions)
    limit = model.cfg.encoder.max_positions
    made = dict(model.static_steps().decoders)
    with pytest.raises(InputError, match=f"position {limit} is past the encoder's {limit} learned positions"):
        generate_codes(model, [5] * limit + [model.cfg.text_eos_id], 0, _params(model, True))
    assert model.static_steps().decoders == made
    with pytest.raises(InputError, match="no text tokens"):
        generate_codes(model, [], 0, _params(model, True))
    codes = generate_codes(model, [5] * (limit - 1) + [model.cfg.text_eos_id], 0, _params(model, True, steps=2))
    assert codes.shape[1] == 2 * model.cfg.frame_stacking  # a text at the limit: a decoder of the encoder's size


def test_a_gpu_keeps_a_q8_0_file_as_stored(nemo_file: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Off the CPU a Q8_0 file's linear layers stay as stored and are widened per product (run here through the
    GPU's plan, with the static steps a GPU captures): the greedy codes of the file widened at load, step for
    step (the same arithmetic)."""
    from ggtts.convert.magpie_nemo import convert_magpie
    from ggtts.gguf import GGUFFile
    from ggtts.models.magpie.model import load_magpie
    from ggtts.ops import stored_weights
    from ggtts.ops.device_weights import DeviceStoredLinear

    path = convert_magpie([nemo_file], nemo_file.parent / "tiny-q8_0.gguf", "q8_0")
    gpu = dataclasses.replace(stored_weights.stored_weights_plan("cuda"), device="cpu")  # kept on the CPU here
    monkeypatch.setattr(stored_weights, "stored_weights_plan", lambda device, requested=True: gpu)
    kept = load_magpie(GGUFFile(path), graph=False)
    monkeypatch.undo()
    wide = load_magpie(GGUFFile(path), graph=False, stored_weights=False)
    assert isinstance(kept.decoder.layers[0].self_attention.qkv_net, DeviceStoredLinear)
    for model in (kept, wide):
        model.use_static_steps(capture=False)
    assert torch.equal(_generate(kept, True, 1), _generate(wide, True, 1))
