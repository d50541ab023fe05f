"""ggtts on the real Kokoro v1.0 weights against hexgrad's own ``KModel`` on the very same weights.

Both sides run the int8 export's dequantized weights: ggtts through our converter and the GGUF file, ``KModel``
(its default STFT) with the same tensors loaded. Every stage is compared with the tolerances of ``ggtts parity``
(:mod:`ggtts.measure.parity`), the whole chain in float64, same phonemes, voice, speed and seed. Three broken
models, each a plausible converter or loader bug, must fail it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from ggtts.convert.kokoro_onnx import NOT_IN_EXPORT
from ggtts.families.kokoro.pipeline import KokoroTTS
from ggtts.gguf import GGUFFile
from ggtts.measure.kokoro import upstream
from ggtts.measure.kokoro.parity import StageResult, kokoro_stages, print_table

pytestmark = [pytest.mark.needs_weights, pytest.mark.needs_reference, pytest.mark.slow]

PHONEMES = "ðə kwˈɪk bɹˈWn fˈɑks ʤˈʌmps ˌOvəɹ ðə lˈAzi dˈɑɡ."  # "The quick brown fox jumps over the lazy dog."
VOICE = "jf_alpha"
SEED = 3


@pytest.fixture(scope="module")
def both(kokoro_int8_state: dict[str, torch.Tensor], kokoro_int8_gguf: Path):
    pytest.importorskip("kokoro")
    from kmodel_reference import build_kmodel

    from ggtts.measure.kokoro.upstream import load_folded

    state = kokoro_int8_state
    tts = KokoroTTS.from_gguf(GGUFFile(kokoro_int8_gguf))
    kmodel = build_kmodel(tts.vocab, disable_complex=False).eval()  # KModel's default STFT
    missing = load_folded(kmodel, state)
    assert set(missing) <= set(NOT_IN_EXPORT)
    ids = torch.tensor([[0, *tts.token_ids(PHONEMES), 0]])
    ref_s = tts.voicepack(VOICE)[len(PHONEMES) - 1]  # the row the pipeline uses
    return kmodel, tts.model, state, ids, ref_s


class _Once:
    """``fn`` run once per distinct call: the same modules (by identity), tensors (by value) and numbers under the
    same default dtype get the first call's result (its tensors cloned, so no caller can change it)."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.results: dict[tuple[Any, ...], Any] = {}

    @staticmethod
    def _key(arg: Any) -> Any:
        if isinstance(arg, torch.Tensor):
            return (arg.dtype, tuple(arg.shape), arg.detach().numpy().tobytes())
        return arg if isinstance(arg, (int, float)) else id(arg)

    def __call__(self, *args: Any) -> Any:
        key = (torch.get_default_dtype(), *map(self._key, args))
        if key not in self.results:
            self.results[key] = self.fn(*args)
        return _cloned(self.results[key])


def _cloned(result: Any) -> Any:
    if isinstance(result, torch.Tensor):
        return result.clone()
    if isinstance(result, dict):
        return {k: _cloned(v) for k, v in result.items()}
    if isinstance(result, tuple):
        return tuple(map(_cloned, result))
    return result  # as_float64's model: the same float64 copy of the same KModel


@pytest.fixture(scope="module")
def kmodel_once(both) -> Iterator[None]:
    """KModel's side of ``kokoro_stages`` (its stages in float32 and float64, its source, its float64 copy) run once
    for the module: every test here runs the same KModel on the same input; only our side differs (a broken copy),
    and it is run every time."""
    with pytest.MonkeyPatch.context() as patch:
        for name in ("upstream_stages", "upstream_source", "as_float64"):
            patch.setattr(upstream, name, _Once(getattr(upstream, name)))
        yield


def _stages(both, model: torch.nn.Module) -> list[StageResult]:
    kmodel, _, state, ids, ref_s = both
    return kokoro_stages(kmodel, model, ids, ref_s, SEED, folded=state)


def test_every_stage_matches_kmodel_on_the_real_weights(both, kmodel_once) -> None:
    results = _stages(both, both[1])
    print_table(results)
    assert [r.stage for r in results if not r.ok] == []


def _f0_bias(model: torch.nn.Module) -> None:
    model.predictor.F0_proj.bias.add_(30.0)  # +30 Hz


def _conv_post(model: torch.nn.Module) -> None:
    model.decoder.generator.conv_post.weight.mul_(1.3)


def _resblock_conv_zeroed(model: torch.nn.Module) -> None:
    model.decoder.generator.resblocks[0].convs1[1].weight.zero_()


@pytest.mark.parametrize(
    ("mutate", "first_failing"),
    [(_f0_bias, "f0"), (_conv_post, "decoder"), (_resblock_conv_zeroed, "decoder")],
    ids=["f0-bias+30Hz", "conv_post-x1.3", "resblock-conv-zeroed"],
)
def test_a_broken_model_fails(both, kmodel_once, mutate: Callable[[torch.nn.Module], None], first_failing: str) -> None:
    broken = copy.deepcopy(both[1])
    with torch.no_grad():
        mutate(broken)
    failing = [r.stage for r in _stages(both, broken) if not r.ok]
    assert failing[:1] == [first_failing] and "end_to_end" in failing, failing
